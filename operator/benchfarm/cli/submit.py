"""`benchfarm upload` and `submit`: a CI pipeline's way into the lab.

`submit` creates a BenchmarkRun (from a file, from flags, or both: the flags win), says how it
goes as its status changes (phase, queue position, progress, conditions), waits for its end,
prints its report and exits with what a pipeline acts on (`core.statistics.gate`): 0 measured and
nothing regressed, 1 a metric regressed (named), 2 the lab's fault (retry later), 3 the run's own
(its software did not boot, a suite failed, its input was refused), 130 interrupted (Ctrl-C or
the pipeline's SIGTERM cancel the run: `spec.cancel`). `--junit`, `--json` and `--kcidb` write
the result for the CI's test report, its artifacts and KernelCI (`report.ci`, one model for all
three; the outcome is `cli.outcome`'s, which `export kcidb` writes for runs already finished).
`upload` puts a build into the namespace's own folder of the lab's store and prints its s3://
URL and SHA-256, for `--kernel` and `--kernel-sha256`. Any cluster, and a kubeconfig (or
in-cluster credentials) is all they need: the store is reached with the namespace's own
credential (`cli.outcome.namespace_store`), never with the lab's.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchfarm.api.base import GROUP, VERSION
from benchfarm.api.outcomes import Phase
from benchfarm.api.runs import ARTIFACT_PARTS, BenchmarkRunSpec, BenchmarkRunStatus
from benchfarm.cli.outcome import lab_api, namespace_store, outcome_of
from benchfarm.core.statistics.gate import Exit, condition

PLURAL = "benchmarkruns"
SUBMITTED_LABEL = "benchfarm.io/submitted-by"


def add_parsers(sub: Any) -> None:
    u = sub.add_parser("upload", help="upload a build to the namespace's folder of the lab's "
                                      "store; print its s3:// URL and SHA-256")
    u.add_argument("file", help="the file to upload")
    u.add_argument("--key", required=True, help="where in the namespace's folder (e.g. "
                   "ci/1234/bzImage): the object is <namespace>/KEY")
    u.add_argument("-n", "--namespace", help="default: the kubeconfig's current namespace")
    u.set_defaults(func=upload_main)

    p = sub.add_parser("submit", help="run a benchmark for a CI pipeline: apply a BenchmarkRun, "
                                      "follow it, print its report; exit 0 ok, 1 regressed, "
                                      "2 the lab's fault, 3 the run's fault")
    p.add_argument("-f", "--file", help="a BenchmarkRun (YAML or JSON); flags override its spec")
    p.add_argument("--plan", help="the TestPlan to run")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--device-type", help="any board of this device type")
    which.add_argument("--board", help="this board (labgrid place)")
    p.add_argument("--label", action="append", default=[], help="KEY=VALUE the board must carry")
    for part in ARTIFACT_PARTS:
        p.add_argument(f"--{part}", metavar="URL", help=f"the {part} to boot (s3:// or https://)")
        p.add_argument(f"--{part}-sha256", metavar="HEX", help=f"the {part}'s SHA-256")
    p.add_argument("--sha256sums", metavar="URL",
                   help="a SHA256SUMS file listing every artifact without --PART-sha256")
    p.add_argument("--boot-args", help="kernel command line added to the board's own")
    p.add_argument("--software-name", help="a label for the software in reports")
    p.add_argument("--iterations", type=int, help="measured iterations of the plan (spec.iterations)")
    p.add_argument("--boot-cycles", type=int, help="timed boots (spec.bootCycles)")
    p.add_argument("--timeout", type=int, help="spec.timeoutSeconds (board acquisition to end)")
    p.add_argument("--queue-timeout", type=int, help="spec.queueTimeoutSeconds")
    p.add_argument("--priority", type=int, help="the run's priority in its namespace's queue (spec.priority)")
    base = p.add_mutually_exclusive_group()
    base.add_argument("--baseline", help="a finished run of the namespace to compare with")
    base.add_argument("--compare-history", action="store_true",
                      help="compare with the latest successful run of the same plan on the same "
                           "device type (or board) in the namespace (none: nothing to compare)")
    p.add_argument("-n", "--namespace", default=None, help="default: the kubeconfig's")
    p.add_argument("--name", help="the run's name (default: generated, ci-<plan>-xxxxx)")
    p.add_argument("--junit", metavar="FILE", help="write JUnit XML here")
    p.add_argument("--json", metavar="FILE", help="write the metrics and verdicts (JSON) here")
    p.add_argument("--kcidb", metavar="FILE", help="write the KCIDB v5 document here")
    p.add_argument("--no-report", action="store_true", help="do not print the report")
    p.add_argument("--poll", type=float, default=2.0, help=argparse.SUPPRESS)
    p.set_defaults(func=submit_main)


def _say(text: str) -> None:
    print(f"benchfarm submit: {text}", file=sys.stderr, flush=True)


def _spec(args: argparse.Namespace, base: dict[str, Any]) -> dict[str, Any]:
    """The run's spec: the file's, with the flags over it."""
    spec = dict(base)
    selector = dict(spec.get("selector") or {})
    if args.device_type:
        selector = {**{k: v for k, v in selector.items() if k != "board"},
                    "deviceType": args.device_type}
    if args.board:
        selector = {**{k: v for k, v in selector.items() if k != "deviceType"},
                    "board": args.board}
    if args.label:
        selector["labels"] = {**selector.get("labels", {}),
                              **dict(kv.split("=", 1) for kv in args.label)}
    spec["selector"] = selector
    if args.plan:
        spec.pop("suites", None)
        spec["plan"] = args.plan
    software = dict(spec.get("software") or {})
    for part in ARTIFACT_PARTS:
        url = getattr(args, part)
        if url:
            digest = getattr(args, f"{part}_sha256")
            software[part] = {"url": url, **({"sha256": digest} if digest else
                                             {"sha256Url": args.sha256sums} if args.sha256sums
                                             else {})}
    if args.boot_args:
        software["bootArgs"] = args.boot_args
    if args.software_name:
        software["name"] = args.software_name
    if software:
        spec["software"] = software
    for flag, field_ in (("iterations", "iterations"), ("boot_cycles", "bootCycles"),
                         ("timeout", "timeoutSeconds"), ("queue_timeout", "queueTimeoutSeconds"),
                         ("priority", "priority"), ("baseline", "baseline")):
        if getattr(args, flag) is not None:
            spec[field_] = getattr(args, flag)
    return spec


def latest_of_plan(runs: list[dict[str, Any]], spec: dict[str, Any]) -> str | None:
    """The plan's history: the name of the latest successful run of the same plan on the same
    device type (or board), by completion time."""
    sel = spec.get("selector") or {}
    same = [r for r in runs
            if (r.get("spec") or {}).get("plan") == spec.get("plan")
            and ((r.get("spec") or {}).get("selector") or {}).get("deviceType")
            == sel.get("deviceType")
            and ((r.get("spec") or {}).get("selector") or {}).get("board") == sel.get("board")
            and BenchmarkRunStatus.of(r.get("status")).phase == Phase.succeeded
            and not (r.get("spec") or {}).get("softwareB")]
    same.sort(key=lambda r: BenchmarkRunStatus.of(r.get("status")).completionTime or "")
    return same[-1]["metadata"]["name"] if same else None


def _write(path: str | None, data: bytes) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data)


def write_outputs(o: Any, args: argparse.Namespace) -> None:
    from benchfarm.report.ci import junit, kcidb, summary
    _write(args.junit, junit([o]))
    _write(args.json, json.dumps(summary(o), indent=2).encode())
    _write(args.kcidb, json.dumps(kcidb([o]), indent=2).encode())


def _changes(body: dict[str, Any], seen: dict[str, Any], say: Callable[[str], None]) -> None:
    """One line for each change of the run's phase, position, progress or conditions."""
    st = BenchmarkRunStatus.of(body.get("status"))
    now = (st.phase, st.queuePosition, st.board, st.progress)
    if now != seen.get("line") and now[0]:
        seen["line"] = now
        where = f" #{now[1]} in the queue" if now[1] else ""
        on = f" on {now[2]}" if now[2] else ""
        say(f"{now[0]}{on}{where}: {now[3] or ''}")
    for c in st.conditions:
        mark = (c.status, c.reason)
        if seen.get(c.type) != mark:
            seen[c.type] = mark
            say(f"  {c.type}={c.status} {c.reason}: {c.message}")


def _api_message(exc: Any) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.body)
    except (TypeError, ValueError):
        return str(exc.body or exc.reason)


def submit_main(args: argparse.Namespace) -> int:
    import yaml
    from kubernetes import client
    from kubernetes.config import ConfigException
    from urllib3.exceptions import HTTPError

    from benchfarm.errors import BenchfarmError, Outage
    from benchfarm.kubeapi.kubeconfig import current_namespace
    body: dict[str, Any] = {}
    if args.file:
        try:
            body = yaml.safe_load(Path(args.file).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            _say(f"cannot read {args.file}: {exc}")
            return Exit.run
    meta = dict(body.get("metadata") or {})
    ns = args.namespace or meta.get("namespace") or current_namespace(args.settings)
    spec = _spec(args, body.get("spec") or {})
    try:
        kube = lab_api(args.settings)
        if args.compare_history:
            previous = latest_of_plan(kube.list_custom(PLURAL, ns), spec)
            _say(f"comparing with run {previous}, the plan's latest" if previous else
                 "no earlier successful run of this plan here: nothing to compare with")
            if previous:
                spec["baseline"] = previous
        try:
            BenchmarkRunSpec(**spec)
        except ValueError as exc:
            _say(f"refused: {exc}")
            return Exit.run
        name = args.name or meta.get("name")
        labels = {**(meta.get("labels") or {}), SUBMITTED_LABEL: "benchfarm-submit"}
        new_meta: dict[str, Any] = {"namespace": ns, "labels": labels}
        if name:
            new_meta["name"] = name
        else:
            new_meta["generateName"] = f"ci-{(spec.get('plan') or 'inline')[:40]}-"
        new = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "BenchmarkRun",
               "metadata": new_meta, "spec": spec}
        try:
            created = kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL,
                                                                  new)
        except client.ApiException as exc:
            if exc.status and 400 <= exc.status < 500 and exc.status != 429:
                _say(f"refused ({exc.status}): {_api_message(exc)}")
                return Exit.run
            raise
        name = created["metadata"]["name"]
        _say(f"{ns}/{name} created")
        return _follow(kube, ns, name, args)
    except (Outage, client.ApiException, ConfigException, OSError, HTTPError) as exc:
        _say(f"the lab is not reachable ({type(exc).__name__}: {exc}); retry later")
        return Exit.lab
    except BenchfarmError as exc:
        _say(f"{exc.reason}: {exc.message} (the lab's fault; retry later)")
        return Exit.lab
    except _Gone as exc:
        _say(f"{exc}; retry later")
        return Exit.lab


class _Interrupted(BaseException):
    """A signal to stop (as KeyboardInterrupt: no `except Exception` on the way swallows it)."""


def _follow(kube: Any, ns: str, name: str, args: argparse.Namespace) -> int:
    seen: dict[str, Any] = {}

    def interrupt(signum: int, frame: Any) -> None:
        raise _Interrupted()
    # Ctrl-C, and the pipeline cancelling its job (SIGTERM); SIGINT explicitly: a job started
    # in the background inherits it ignored
    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    interrupted = False
    try:
        body = _wait(kube, ns, name, seen, args.poll)
    except (KeyboardInterrupt, _Interrupted):
        interrupted = True
        _say(f"interrupted: cancelling {ns}/{name}")
        for s in previous:      # the cancel is on its way: let it land
            signal.signal(s, signal.SIG_IGN)
        kube.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name,
                                                   {"spec": {"cancel": True}})
        try:
            body = _wait(kube, ns, name, seen, args.poll, limit=120)
        except TimeoutError:
            _say(f"{ns}/{name} did not stop within 120 s; it has spec.cancel set")
            return Exit.interrupted
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    o, report = outcome_of(body, args.settings, interrupted=interrupted)
    if report and not args.no_report:
        print(report, flush=True)
    elif not args.no_report:
        done = condition(body.get("status") or {})
        print(f"# {ns}/{name}: {BenchmarkRunStatus.of(body.get('status')).phase}\n\n"
              f"{done.get('reason', '')}: "
              f"{done.get('message', '')}", flush=True)
    write_outputs(o, args)
    _say(f"{ns}/{name}: exit {int(o.decision.code)}: {o.decision.why}")
    return int(o.decision.code)


def _wait(kube: Any, ns: str, name: str, seen: dict[str, Any], every: float,
          limit: float | None = None) -> dict[str, Any]:
    deadline = None if limit is None else time.monotonic() + limit
    while True:
        body = kube.get_run(ns, name)
        if body is None:
            raise _Gone(f"run {ns}/{name} was deleted")
        _changes(body, seen, _say)
        if BenchmarkRunStatus.of(body.get("status")).phase in (Phase.succeeded, Phase.failed,
                                                               Phase.cancelled):
            return dict(body)
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(name)
        time.sleep(every)


class _Gone(Exception):
    pass


# -- upload ------------------------------------------------------------------------------------

def upload_key(namespace: str, key: str) -> str:
    """`<namespace>/<key>`; ValueError for an empty key, an empty, '.' or '..' segment."""
    parts = key.split("/")
    if not key or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"--key {key!r}: folders and a name, no empty, '.' or '..' segment "
                         "and no leading or trailing '/'")
    return f"{namespace}/{key}"


def upload_main(args: argparse.Namespace) -> int:
    """Exit 0 uploaded (stdout: `URL SHA256`), 1 a bad file or key, 2 the lab's fault."""
    import hashlib

    from kubernetes import client
    from kubernetes.config import ConfigException

    from benchfarm.errors import BenchfarmError
    from benchfarm.kubeapi.kubeconfig import current_namespace
    ns = args.namespace or current_namespace(args.settings)
    path = Path(args.file)
    try:
        key = upload_key(ns, args.key)
        digest = hashlib.sha256()
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        size = path.stat().st_size
    except (ValueError, OSError) as exc:
        print(f"benchfarm upload: {exc}", file=sys.stderr)
        return 1
    try:
        url = namespace_store(ns, args.settings).put_stream(key, lambda: path.open("rb"), length=size,
                                             sha256=digest.hexdigest())
    except (BenchfarmError, client.ApiException, ConfigException, OSError) as exc:
        print(f"benchfarm upload: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 2
    print(f"{url} {digest.hexdigest()}")
    return 0
