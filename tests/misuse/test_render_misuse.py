"""Issue 53: one run's figures hung the dashboard. An inline hackbench step whose two iterations
print `Time: 10000000000000000` and `Time: 10000000000000002` (one unit in the last place apart)
made the history chart's axis loop stand still on the dashboard's event loop: that history page
and `/lab` timed out for every user, and the web process grew past 2 GB. Now an axis is linear
whatever the figures (report.svg), and a page drawn from a tenant's figures is rendered in a
budgeted child (web.rendering, BENCHFARM_WEB_RENDER_CPU_SECONDS): the history page answers (its
chart, or a 503 past the budget) and `/lab` answers meanwhile. A breach: either page did not
answer within its time, or the history page answered neither 200 nor 503.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import yaml

from benchfarm.settings import Settings
from benchfarm_devlab.lab import LAB_POLICY, apply_lab_policy
from tests.stack.conftest import apply, kube, lab, operator, wait_for  # noqa: F401 (fixtures)
from tests.stack.crossns import dashboard, http, tenant
from tests.stack.runs import GROUP, VERSION, finished

pytestmark = pytest.mark.stack
COMMAND = ("if [ -e /tmp/bf-ulp ]; then echo 'Time: 10000000000000002'; "
           "else touch /tmp/bf-ulp; echo 'Time: 10000000000000000'; fi")


def test_figures_one_ulp_apart_leave_the_dashboard_answering(kube, operator, attempt):  # noqa: F811
    from kubernetes import client
    core, rbac = client.CoreV1Api(kube), client.RbacAuthorizationV1Api(kube)
    custom = client.CustomObjectsApi(kube)
    ns = f"ulp-{uuid.uuid4().hex[:5]}"
    token = tenant(core, rbac, ns)
    policy = {**LAB_POLICY, "spec": {**LAB_POLICY["spec"], "namespaces": [
        *LAB_POLICY["spec"]["namespaces"], {"namespace": ns, "allowInlineSuites": True}]}}
    try:
        apply(yaml.safe_dump(policy))
        time.sleep(2)
        apply(yaml.safe_dump({
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "BenchmarkRun",
            "metadata": {"name": "ulp", "namespace": ns},
            "spec": {"selector": {"deviceType": "qemu-x86"}, "iterations": 2, "bootCycles": 1,
                     "timeoutSeconds": 300, "suites": [{"name": "hb", "suite": "hackbench",
                                                        "command": COMMAND,
                                                        "timeoutSeconds": 30}]}}))
        st = finished(custom, "ulp", ns, timeout=600)
    finally:
        apply_lab_policy()
    assert st["phase"] == "Succeeded", st
    from benchfarm.history import Database
    db = Database.from_settings(Settings.from_env())
    wait_for("the run in the results database", lambda: db.series_rows(
        ns, "hb/hackbench-time", "qemu-x86", "(inline)"), timeout=120, every=1)
    with dashboard() as url:             # this checkout's dashboard, its history the database's
        pages: dict[str, tuple[int, float]] = {}

        def get(name: str, path: str) -> None:
            t = time.monotonic()
            status, _ = http(url + path, token)
            pages[name] = (status, time.monotonic() - t)

        history = threading.Thread(target=get, args=("history", f"/history?namespace={ns}"))
        history.start()
        time.sleep(0.5)
        get("lab", "/lab")
        history.join(60)
    (hstatus, htook), (lstatus, ltook) = pages.get("history", (0, 60.0)), pages["lab"]
    answered = hstatus in (200, 503) and htook < 30 and lstatus == 200 and ltook < 10
    attempt("figures one ulp apart, then their history page",
            f"history {hstatus} in {htook:.1f} s, /lab {lstatus} in {ltook:.1f} s",
            lost=not answered)
    assert answered, pages
