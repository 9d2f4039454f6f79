"""Issue 40's four-four-four history, made once per test process: the stack test of per-namespace
history (tests/stack/test_history_tenants.py) and the misuse table's row (tests/misuse) share it.

Two tenants' namespaces run the same inline plan on `qemu-x86` through the real operator: four
runs of team A whose hackbench-like step prints `Time: 1.000`, then four of team B printing
`Time: 0.500` (and a step of its own, `teamb-only`), then four of team A again. Merged, these
twelve runs have a regression of +100 % at team A's fifth run; per namespace, none. Each run is
the smallest there is (one boot, two iterations of an `echo`: two samples per run, the fewest
the change-point search judges), and the plan prints a fixed figure, so the series is the same
whatever the machine's load. Each call of `series()` in one process returns the same runs.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

import benchfarm_devlab as devlab
from benchfarm.settings import Settings
from benchfarm_devlab import VENV_BIN
from benchfarm_devlab.lab import LAB_POLICY, apply_lab_policy
from tests.stack.conftest import apply, wait_for
from tests.stack.runs import GROUP, VERSION, finished

REPO = Path(__file__).resolve().parents[2]
METRIC, OWN_STEP, DEVICE_TYPE, PLAN = "hb/hackbench-time", "teamb-only", "qemu-x86", "(inline)"
_MADE: dict[str, Any] = {}


def _suites(figure: str, own_step: bool) -> list[dict[str, Any]]:
    suites = [{"name": "hb", "suite": "hackbench", "command": f"echo 'Time: {figure}'",
               "timeoutSeconds": 30}]
    if own_step:
        suites.append({"name": OWN_STEP, "suite": "hackbench", "command": "echo 'Time: 0.250'",
                       "timeoutSeconds": 30})
    return suites


def _run(name: str, ns: str, figure: str, own_step: bool = False) -> str:
    return yaml.safe_dump({
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "BenchmarkRun",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"selector": {"deviceType": DEVICE_TYPE}, "suites": _suites(figure, own_step),
                 "iterations": 2, "bootCycles": 1, "timeoutSeconds": 300}})


def tenant(core: Any, rbac: Any, ns: str) -> str:
    """The namespace, and a token of a ServiceAccount that may read its BenchmarkRuns only (the
    dashboard test's person)."""
    from tests.stack.test_web import _person
    return str(_person(core, rbac, ns))


def series(kube: Any) -> dict[str, Any]:
    """The twelve runs (made at the first call): {"a", "b": namespaces, "tokens": {ns: token},
    "runs": {ns: [names, in the order applied]}, "uids": {"ns/name": uid}}."""
    if _MADE:
        return _MADE
    from kubernetes import client
    core, rbac = client.CoreV1Api(kube), client.RbacAuthorizationV1Api(kube)
    custom = client.CustomObjectsApi(kube)
    tag = uuid.uuid4().hex[:5]
    a, b = f"hist-a-{tag}", f"hist-b-{tag}"
    tokens = {ns: tenant(core, rbac, ns) for ns in (a, b)}
    policy = {**LAB_POLICY, "spec": {**LAB_POLICY["spec"], "namespaces": [
        *LAB_POLICY["spec"]["namespaces"],
        *({"namespace": ns, "allowInlineSuites": True} for ns in (a, b))]}}
    apply(yaml.safe_dump(policy))
    time.sleep(2)               # the operator's view of the LabPolicy (test_policy does the same)
    runs: dict[str, list[str]] = {a: [], b: []}
    try:
        for ns, figure in ((a, "1.000"), (b, "0.500"), (a, "1.000")):
            names = [f"hb-{len(runs[ns]) + i}" for i in range(4)]
            for name in names:
                apply(_run(name, ns, figure, own_step=ns == b))
            for name in names:          # each four finish before the next four start
                st = finished(custom, name, ns, timeout=600)
                assert st["phase"] == "Succeeded", (ns, name, st)
            runs[ns] += names
    finally:
        apply_lab_policy()
    uids = {f"{ns}/{name}": custom.get_namespaced_custom_object(
        GROUP, VERSION, ns, "benchmarkruns", name)["metadata"]["uid"]
        for ns, names in runs.items() for name in names}
    from benchfarm.history import Database
    db = Database.from_settings(Settings.from_env())

    def indexed() -> bool:
        return all(len(db.series_rows(ns, METRIC, DEVICE_TYPE, PLAN)) == len(names)
                   for ns, names in runs.items())
    wait_for("the twelve runs in the results database", indexed, timeout=120, every=1)
    # the operator's indexer looks for change points at most every DETECT_EVERY (5 s) after a
    # run is indexed: a point it would raise an event for is there well within 20 s
    time.sleep(20)
    _MADE.update(a=a, b=b, tokens=tokens, runs=runs, uids=uids)
    return _MADE


def benchfarm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VENV_BIN / "benchfarm"), *args], check=check, text=True,
                          capture_output=True, env=os.environ)


def change_point_events(kube: Any, ns: str) -> list[str]:
    """The ChangePoint events in a namespace, as `run: message`."""
    from kubernetes import client
    return [f"{e.involved_object.name}: {e.message}" for e in
            client.CoreV1Api(kube).list_namespaced_event(ns).items if e.reason == "ChangePoint"]


def http(url: str, token: str) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except urllib.error.URLError as exc:        # not listening (yet)
        return 0, str(exc.reason)


@contextlib.contextmanager
def dashboard() -> Iterator[str]:
    """A `benchfarm web` of this checkout on a free port, its history from the results
    database (the default where BENCHFARM_DATABASE_URL is set): its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, **devlab.lab_env(), "PYTHONPATH": os.pathsep.join([str(REPO),
                                                                            *sys.path])}
    log = devlab.STATE / "logs" / f"history-web-{port}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        web = subprocess.Popen([sys.executable, "-m", "benchfarm.cli", "web", "--port",
                                str(port)], env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for("benchfarm web", lambda: urllib_ok(url + "/healthz"), timeout=60)
        yield url
    finally:
        web.terminate()
        web.wait(10)


def urllib_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False
