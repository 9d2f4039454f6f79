"""A run's reports have a CPU budget, on the real lab: the operator (and so its session server and
every session) runs with BENCHFARM_REPORT_CPU_SECONDS=1, and an inline console-timing step of a
namespace allowed 40,000 metrics prints 20,000 timing lines. Its reports take seconds of CPU to
build: the session builds them in its budgeted child, which is stopped at 1 s; the run fails with
ReportOverBudget (the run's fault), never resumed (the session renewed its Lease meanwhile), no
board charged, and the operator answers its liveness probe throughout. The lab's own operator is
started again afterwards.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest
import yaml

import benchfarm_devlab as devlab
from benchfarm_devlab.lab import LAB_POLICY, apply_lab_policy
from benchfarm_devlab.processes import FIRST_NICE, OPERATOR_FIRST
from tests.stack.conftest import apply, kube, lab  # noqa: F401 (fixtures)
from tests.stack.runs import GROUP, VERSION, cond, finished, run_yaml, unique

pytestmark = pytest.mark.stack
NS = "report-budget"
LINES = 20_000          # two metrics a line: 40,000, seconds of CPU to report


def _operator(extra: dict[str, str]) -> str:
    """The lab's operator again, with `extra` in its environment; its liveness URL."""
    devlab.stop_process("benchfarm-operator")
    env = {**devlab.lab_env(), **devlab.operator_env(), **OPERATOR_FIRST, **extra}
    devlab.start_process("benchfarm-operator", [str(devlab.VENV_BIN / "benchfarm"), "operator"],
                         env=env, nice=FIRST_NICE, timeout=90,
                         ports=[devlab.PORTS.operator_liveness, devlab.PORTS.operator_metrics],
                         ready=lambda: devlab.http_ok(env["BENCHFARM_LIVENESS"]))
    return env["BENCHFARM_LIVENESS"]


def _policy() -> None:
    """The lab's LabPolicy, with inline suites and 40,000 metrics a run for NS."""
    from kubernetes import client
    try:
        client.CoreV1Api().create_namespace({"metadata": {"name": NS}})
    except client.ApiException as exc:
        assert exc.status == 409
    policy = json.loads(json.dumps(LAB_POLICY))
    policy["spec"]["namespaces"].append({"namespace": NS, "allowInlineSuites": True,
                                         "maxMetricsPerRun": 2 * LINES + 3})  # + the step's energy metrics
    apply(yaml.safe_dump(policy))
    time.sleep(2)


def _boards(custom) -> dict[str, int]:
    return {b["metadata"]["name"]: (b.get("status") or {}).get("consecutiveInfraFailures") or 0
            for b in custom.list_cluster_custom_object(GROUP, VERSION, "boards")["items"]}


def test_a_runs_figures_past_the_report_budget_fail_it_and_the_lab_answers(kube):  # noqa: F811
    from kubernetes import client
    custom = client.CustomObjectsApi(kube)
    liveness = _operator({"BENCHFARM_REPORT_CPU_SECONDS": "1"})
    slow: list[float] = []
    done = threading.Event()

    def probe() -> None:          # the operator's liveness, every second of the run
        while not done.is_set():
            t = time.monotonic()
            try:
                urllib.request.urlopen(liveness, timeout=10).read()
                slow.append(time.monotonic() - t)
            except OSError:
                slow.append(float("inf"))
            done.wait(1.0)

    name = unique("figures")
    try:
        _policy()
        before = _boards(custom)
        body = yaml.safe_load(run_yaml(name, ns=NS, plan=None, bootCycles=1, iterations=1))
        body["spec"]["suites"] = [{
            "name": "timing", "suite": "console-timing", "parameters": {"clockMHz": "100"},
            "command": f'i=0; while [ $i -lt {LINES} ]; do echo "k_$i $i"; i=$((i + 1)); done',
            "timeoutSeconds": 300}]
        threading.Thread(target=probe, daemon=True).start()
        apply(yaml.safe_dump(body))
        st = finished(custom, name, ns=NS, timeout=600)
        done.set()
        after = _boards(custom)
    finally:
        done.set()
        apply_lab_policy()
        devlab.stop_process("benchfarm-operator")
        devlab.start_operator()         # the lab's own operator, for the tests after this one
    c = cond(st)
    assert st["phase"] == "Failed" and c.get("reason") == "ReportOverBudget", st
    assert "took more than the 1 CPU seconds" in c["message"], c
    assert "BENCHFARM_REPORT_CPU_SECONDS" in c["message"], c
    assert not st.get("resumes"), st                    # the session renewed its Lease
    assert sum(max(0, after.get(b, 0) - n) for b, n in before.items()) == 0   # no board charged
    assert slow and max(slow) < 5, slow                 # the operator answered throughout
