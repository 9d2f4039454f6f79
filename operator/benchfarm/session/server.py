"""`benchfarm session server`: a warm parent that forks one board session per request.

A cold session process spends seconds importing labgrid, grpc, kubernetes, minio, pydantic,
scipy and matplotlib before it can acquire its board (2.5 s alone; ten on a host busy with a
thousand-board lab), and a process that has served a run cannot serve another: labgrid fixes a
client's identity (the run's) when it connects. So the operator's process launcher keeps this
server: it imports all of it once, then reads one JSON request per line on stdin (`argv`:
`run NS/NAME` or `health BOARD CHECK`; `log`, `env`) and forks a session for each (a few
milliseconds), replying with the session's pid on stdout. The session is forked twice and calls
setsid, so it belongs to neither the server nor the operator: killing either (even with
SIGKILL) kills no session, as with a cold process; and it leads a process group of its own, as a
cold process does, so that the operator ends a session it gave up on by its group.

Forking is safe because the server never starts a thread, a grpc channel or an API client: it only
imports (and asks OpenBLAS for no thread pool) and starts the forkserver its sessions parse and
report in (`budgeted.share`: a process, one for all of them); it says when the imports are done (`ready`), so
the operator hands it runs only from then on and starts a cold process before that. End-of-file
on stdin (the operator went away): the server exits; its sessions go on.

What a session would otherwise redo each time is done here once, before the first fork: the
Kubernetes client's argument validators (`kubeapi.client.prebuild`), the report's template, and
`gc.freeze()` of everything imported, so that a session's full collections walk only its own
objects (200,000 inherited ones took 0.15 s of CPU and copied 50 MB of pages per collection).
"""

from __future__ import annotations

import gc
import json
import logging
import os
import sys
import time
import traceback
from typing import Any

from benchfarm.api.outcomes import SessionKind
from benchfarm.logs import configure
from benchfarm.settings import Settings, adopt

log = logging.getLogger("benchfarm.session")


def _import_everything(settings: Settings) -> None:
    from benchfarm.session import health, leaseend, runner  # noqa: F401
    runner._prewarm()              # statistics and plotting, the end of a session
    # the Kubernetes client builds its API and model classes on first use: a second or more
    from kubernetes import client, watch  # noqa: F401
    for cls in ("CoreV1Api", "CustomObjectsApi", "CoordinationV1Api", "V1Lease", "V1LeaseSpec",
                "V1ObjectMeta", "V1DeleteOptions", "V1Preconditions"):
        getattr(client, cls, None)
    from benchfarm.kubeapi.client import prebuild
    prebuild()
    from benchfarm.report.html import template
    template()
    # the device types, read once here (a session reads them again only if a file changed)
    from benchfarm.lab.devicetypes import load_device_types
    try:
        load_device_types(settings.device_types)
    except Exception:  # a session reports a broken device type itself
        log.debug("the device types could not be read ahead", exc_info=True)
    # the parses' and the reports' forkserver (a process, not a thread), one for every session
    from benchfarm import budgeted
    from benchfarm.session.parsing import PRELOAD
    budgeted.share(PRELOAD)
    gc.collect()
    gc.freeze()       # the session's full collections leave all of the above alone


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _session(request: dict[str, Any], report: int, server: int) -> None:
    """In the first child: leave the server's session, fork the runner, report its pid, exit."""
    os.setsid()
    pid = os.fork()
    if pid:
        os.write(report, f"{pid}\n".encode())
        os._exit(0)
    code = 1
    try:
        os.setpgid(0, 0)     # the leader of its own process group, as a cold session is:
        #                      the group is what `end` kills (its parses' children are the
        #                      server's forkserver's, each ended by its CPU budget)
        os.close(report)
        fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.close(null)
        sys.stdout = open(1, "w", buffering=1, closefd=False)    # not the server's reply pipe
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        adopt(request.get("env") or {})
        log.info("session process %d forked by the session server %d: %s", os.getpid(),
                 server, " ".join(request["argv"]))
        code = dispatch(request["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # the log file is gone or closed; nothing left to tell
                pass
        os._exit(code)


def dispatch(argv: list[str]) -> int:
    """`benchfarm session <kind> ...` in this process: a run's session or a health check's."""
    kind, args = SessionKind(argv[0]), argv[1:]
    if kind == SessionKind.health_check:
        from benchfarm.session import health
        return health.main(args[0], int(args[1]))
    if kind == SessionKind.lease_end:
        from benchfarm.session import leaseend
        return leaseend.main(args[0])
    from benchfarm.session import runner
    return runner.main(args[0])


def fork_session(request: dict[str, Any]) -> int:
    """Start a session for the request; its pid (the session is nobody's child here)."""
    r, w = os.pipe()
    me = os.getpid()
    child = os.fork()
    if child == 0:
        os.close(r)
        try:
            _session(request, w, me)
        finally:
            os._exit(1)
    os.close(w)
    with os.fdopen(r, "rb") as pipe:
        line = pipe.readline()
    os.waitpid(child, 0)
    if not line.strip():
        raise OSError(f"the session {request.get('argv')} could not be forked")
    return int(line)


def reply(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def serve() -> int:
    t0 = time.monotonic()
    settings = Settings.from_env()   # the server's; each forked session reads its own (its run's)
    configure(settings.log_level)
    _import_everything(settings)
    if _threads() > 1:
        log.warning("the session server has %d threads after its imports; forking may copy a "
                    "lock someone holds", _threads())
    log.info("session server %d ready in %.1f s", os.getpid(), time.monotonic() - t0)
    reply({"ready": os.getpid()})
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            SessionKind(request["argv"][0])
            pid = fork_session(request)
        except (OSError, ValueError, KeyError, IndexError) as exc:
            log.error("could not start a session for %r: %s", line.strip()[:200], exc)
            reply({"error": str(exc)})
            continue
        log.info("forked session %d: %s", pid, " ".join(request["argv"]))
        reply({"pid": pid})
    return 0
