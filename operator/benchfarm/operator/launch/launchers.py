"""How the operator starts a board session: the launcher of a kind chosen by the environment,
and its local-process kind. The interface (`Launch`, `Launcher`) is `operator.launch.interface`, re-exported here.

The operator never runs a session itself; it asks a launcher to start `benchfarm session run
NS/NAME` (or a board's health check, `benchfarm session health BOARD CHECK`) somewhere and from
then on only watches the run's status (the Board's) and the session's Lease. The embedded lab's
launcher starts a local process in its own process group and session, so killing the operator
(even with SIGKILL) kills no session; a session the operator gives up on (`end`) is ended with
its whole process group (its parses' children too), SIGKILL after a short SIGTERM grace. In a
cluster, `operator.launch.jobs` starts each session as a Kubernetes Job instead (BENCHFARM_LAUNCHER=job).
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchfarm.api.outcomes import SessionKind
from benchfarm.operator.launch.credentials import OPERATOR_ONLY, SessionCredentials, session_env
from benchfarm.operator.launch.interface import Launch as Launch, Launcher as Launcher
from benchfarm.settings import Settings

log = logging.getLogger(__name__)

class ProcessLauncher:
    """A runner as a local process, detached from the operator, logging to a file per attempt.

    A cold Python process spends about 2.5 s importing labgrid, kubernetes, minio and pydantic
    before it can acquire its board (ten on a busy host), so the launcher keeps a session server
    (`benchfarm session server`, `session.server`): imported once, it forks each session in a few
    milliseconds and replies with its pid. Until the server says it is ready, or if it fails,
    a launch starts a cold process instead. Sessions belong to neither the server nor the
    operator, so killing either kills no session.
    """

    REPLY_TIMEOUT = 10.0     # seconds for the server to report a forked session's pid
    TERM_GRACE = 3.0         # seconds an ended session has after SIGTERM, before SIGKILL

    def __init__(self, log_dir: Path, env: dict[str, str] | None = None,
                 command: list[str] | None = None, pid_dir: Path | None = None,
                 server: bool = True, credentials: SessionCredentials | None = None, *,
                 environ: Mapping[str, str]) -> None:
        """`environ`: the operator's environment (`Settings.environ`), which every session
        inherits; `env`: what is set over it."""
        self.log_dir = log_dir
        self.environ = environ
        self.credentials = credentials
        self.pid_dir = pid_dir       # the embedded lab stops sessions by these on `lab down`
        self.env = env
        self.command = command or [sys.executable, "-m", "benchfarm.cli", "session"]
        self.children: dict[int, subprocess.Popen[bytes]] = {}   # cold sessions and the server
        self.forked: set[int] = set()                     # sessions the server forked
        self.runs: dict[int, tuple[str, str]] = {}   # pid -> (its run's, board's or lease's uid,
        #                                              the process's start time)
        self.use_server = server
        self.server: subprocess.Popen[bytes] | None = None
        self.server_ready = False
        self._buffer = b""

    def launch(self, req: Launch) -> str:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if req.kind == SessionKind.health_check:
            logfile = self.log_dir / f"health.{req.board}.check-{req.attempt}.log"
        elif req.kind == SessionKind.lease_end:
            logfile = self.log_dir / f"lease.{req.namespace}.{req.name}.end.log"
        else:
            logfile = self.log_dir / (f"{req.namespace}.{req.name}.attempt-{req.attempt}"
                                      f".run-{req.resume}.log")
        ref = req.what()
        own = session_env(req, self.credentials)
        how, pid = "the session server", self._fork(ref, req.argv(), own, logfile)
        if pid is None:
            how = "a cold process"
            env = {**self._base_env(), **own}
            with logfile.open("ab") as out:
                pid = self._start([*self.command, *req.argv()], out, env,
                                  stdin=subprocess.DEVNULL).pid
        if pid:
            self._note_run(pid, req.uid)
        self.top_up()
        log.info("launched the session of %s from %s: pid %s, log %s", ref, how,
                 pid or "not reported", logfile)
        # what the run's events show: its log's host path stays in the operator's log
        return f"pid {pid}" if pid else "pid not reported"

    def _fork(self, ref: str, argv: list[str], env: dict[str, str],
              logfile: Path) -> int | None:
        """The pid of a session the server forked; None: start a cold one; 0: the server took
        the request but did not report a pid (the run's Lease tells whether its session lives)."""
        srv = self.server
        if srv is None or srv.poll() is not None or srv.stdin is None:
            return None
        if not self.server_ready:
            line = self._reply(0)
            self.server_ready = bool(line and "ready" in line)
            if not self.server_ready:
                return None
        request = {"argv": argv, "log": str(logfile), "env": env}
        try:
            srv.stdin.write((json.dumps(request) + "\n").encode())
            srv.stdin.flush()
        except OSError:                      # it died meanwhile
            self._drop_server()
            return None
        reply = self._reply(self.REPLY_TIMEOUT)
        if reply is None:
            log.warning("the session server %d did not report the session of %s in %.0f s; "
                        "replacing it", srv.pid, ref, self.REPLY_TIMEOUT)
            self._drop_server()
            return 0
        if "pid" not in reply:
            log.warning("the session server could not fork the session of %s: %s", ref,
                        reply.get("error"))
            return None
        pid = int(reply["pid"])
        self.forked.add(pid)
        self._pidfile(pid)
        return pid

    def _reply(self, timeout: float) -> dict[str, Any] | None:
        """The server's next reply line, or None if none came within `timeout` seconds."""
        assert self.server is not None and self.server.stdout is not None
        fd = self.server.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:                    # the server exited
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            msg: dict[str, Any] | None = json.loads(line)
            return msg
        except ValueError:
            return {"error": line.decode(errors="replace")[:200]}

    def _drop_server(self) -> None:
        if self.server is not None:
            try:
                self.server.kill()        # its sessions live on: they called setsid
            except OSError:
                pass
        self.server, self.server_ready, self._buffer = None, False, b""

    def top_up(self) -> None:
        """Start the session server if it is not running (after each launch and by `reap`)."""
        if not self.use_server or (self.server is not None and self.server.poll() is None):
            return
        self._drop_server()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        # no OpenBLAS thread pool in a process that forks
        env = {**self._base_env(), "OPENBLAS_NUM_THREADS": "1"}
        with (self.log_dir / "session-server.log").open("ab") as out:
            self.server = self._start([*self.command, "server"], out, env,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def _base_env(self) -> dict[str, str]:
        """What every session inherits: the operator's environment, less its own labgrid
        credentials where sessions get theirs (`SessionCredentials`)."""
        env = {**self.environ, **(self.env or {})}
        if self.credentials is not None:
            for k in OPERATOR_ONLY:
                env.pop(k, None)
        return env

    def _start(self, argv: list[str], out: Any, env: dict[str, str], *, stdin: int,
               stdout: Any = None) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(argv, stdout=stdout or out, stderr=out, stdin=stdin, env=env,
                                start_new_session=True)
        self.children[proc.pid] = proc
        self._pidfile(proc.pid)
        return proc

    def _pidfile(self, pid: int, remove: bool = False) -> None:
        if self.pid_dir is None:
            return
        path = self.pid_dir / f"session-{pid}.pid"
        if remove:
            path.unlink(missing_ok=True)
            path.with_suffix(".run").unlink(missing_ok=True)
        else:
            self.pid_dir.mkdir(parents=True, exist_ok=True)
            path.write_text(str(pid))

    def reap(self) -> None:
        for pid, proc in list(self.children.items()):
            if proc.poll() is not None:
                del self.children[pid]
                self._pidfile(pid, remove=True)
        for pid in list(self.forked):       # not our children: init reaps them
            if not _alive(pid):
                self.forked.discard(pid)
                self._pidfile(pid, remove=True)
        for pid in list(self.runs):
            if not _alive(pid):
                self.runs.pop(pid, None)
        self.top_up()

    # -- ending a session ---------------------------------------------------------------------
    def _note_run(self, pid: int, uid: str) -> None:
        """Which run (or board, or lease) a session process serves, with its start time (a pid the kernel gave to
        another process since is never signalled); beside its pid file, for a restarted
        operator."""
        started = _start_time(pid)
        if started is None:             # it already ended
            return
        self.runs[pid] = (uid, started)
        if self.pid_dir is not None:
            (self.pid_dir / f"session-{pid}.run").write_text(f"{uid} {started}\n")

    def _sessions_of(self, uid: str) -> list[int]:
        """The live session processes of run (or board, or lease) `uid`: launched by this operator, or named in the
        pid directory by an earlier one."""
        known = dict(self.runs)
        if self.pid_dir is not None:
            for path in self.pid_dir.glob("session-*.run"):
                try:
                    pid = int(path.stem.removeprefix("session-"))
                    run_uid, started = path.read_text().split()
                except (OSError, ValueError):
                    continue
                if not _alive(pid):
                    path.unlink(missing_ok=True)
                    continue
                known.setdefault(pid, (run_uid, started))
        return [pid for pid, (run_uid, started) in known.items()
                if run_uid == uid and _start_time(pid) == started]

    def end(self, req: Launch) -> str:
        """SIGTERM to the process group of every live session of the run (or the board's
        health check: of `req.uid`; a session is its
        group's leader: it calls setsid), SIGKILL to what is left after TERM_GRACE."""
        groups = {}
        for pid in self._sessions_of(req.uid):
            try:
                group = os.getpgid(pid)
            except ProcessLookupError:
                continue
            if group != os.getpgrp():        # never the operator's own
                groups[pid] = group
        if not groups:
            return "no session process was running"
        for group in set(groups.values()):
            _signal_group(group, signal.SIGTERM)
        deadline = time.monotonic() + self.TERM_GRACE
        while time.monotonic() < deadline and any(_alive(pid) for pid in groups):
            time.sleep(0.1)
            self._poll_children()
        killed = {group for pid, group in groups.items() if _alive(pid)}
        for group in killed:
            _signal_group(group, signal.SIGKILL)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and any(_alive(pid) for pid in groups):
            time.sleep(0.05)
            self._poll_children()
        for pid in groups:
            self.runs.pop(pid, None)
            if self.pid_dir is not None:
                (self.pid_dir / f"session-{pid}.run").unlink(missing_ok=True)
        how = "killed after SIGTERM" if killed else "stopped on SIGTERM"
        return f"session process(es) {', '.join(map(str, sorted(groups)))} {how}"

    def _poll_children(self) -> None:
        for proc in self.children.values():   # a cold session is our child: no zombie left
            proc.poll()


def _signal_group(group: int, sig: int) -> None:
    try:
        os.killpg(group, sig)
    except ProcessLookupError:       # it ended meanwhile
        pass


def _start_time(pid: int) -> str | None:
    """When the process started (clock ticks since boot, /proc/PID/stat field 22); None: no
    such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[19].decode()
    except (OSError, IndexError):
        return None


def _alive(pid: int) -> bool:
    """A process that exists and has not exited (a zombie whose reaper is slow has)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def from_settings(settings: Settings, kube: object) -> Launcher:
    """The launcher the settings name: a Job per session (`operator.launch.jobs`) or a local process."""
    if settings.launcher == "job":
        from benchfarm.operator.launch.jobs import JobLauncher
        return JobLauncher.from_settings(settings, kube)
    return ProcessLauncher(settings.session_logs_dir,
                           pid_dir=settings.session_pids, server=settings.session_server,
                           credentials=SessionCredentials.from_settings(settings),
                           environ=settings.environ)
