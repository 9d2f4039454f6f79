"""A session the operator gives up on is ended before another is launched (issue 53).

A session stalled by what its board printed renewed no Lease while it spun; the operator resumed
the run beside it, four times, and four old sessions were still running after the run failed.
Here a session is frozen (SIGSTOP: it renews no Lease, as one stalled in C code would not, and it
cannot act on SIGTERM) in the middle of a suite: the operator kills its whole process group
before it resumes the run, and the run succeeds with one session at a time.
"""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from tests.stack.conftest import apply, kube, lab, operator, wait_for  # noqa: F401 (fixtures)
from tests.stack.runs import cond, finished, run_yaml, session_pids, status, unique

pytestmark = pytest.mark.stack

# the step lasts long enough to freeze its session in it (the test sees it start within a
# second) and no longer: the resumed session does it again whole
STALL_PLAN = """
apiVersion: benchfarm.io/v1alpha1
kind: TestPlan
metadata: {name: stacktest-stall}
spec:
  suites:
    - {name: sleep, suite: shell, command: sleep 15, timeoutSeconds: 120}
"""


@pytest.fixture(scope="module")
def custom(kube, operator):  # noqa: F811
    from kubernetes import client
    apply(STALL_PLAN)
    return client.CustomObjectsApi(kube)


def in_groups(groups: set[int]) -> list[str]:
    """`ps` lines of the live processes of these process groups."""
    out = subprocess.run(["ps", "-eo", "pid=,pgid=,stat=,args="], capture_output=True,
                         text=True, check=True).stdout
    return [line.strip() for line in out.splitlines()
            if (f := line.split(None, 3)) and int(f[1]) in groups and not f[2].startswith("Z")]


def test_a_stalled_session_is_ended_with_its_process_group_before_the_run_resumes(custom):
    name = unique("stall")
    apply(run_yaml(name, plan="stacktest-stall", bootCycles=1, iterations=1,
                   timeoutSeconds=600))
    wait_for("the sleep suite to start",
             lambda: "sleep" in (status(custom, name).get("progress") or ""), timeout=180)
    stalled = set(session_pids("default", name))
    assert stalled, "no session process of the run"
    groups = {os.getpgid(pid) for pid in stalled}
    assert groups == stalled                    # each session leads its own process group
    for pid in stalled:
        os.kill(pid, signal.SIGSTOP)
    try:
        wait_for("the run resumed", lambda: status(custom, name).get("resumes") == 1,
                 timeout=180)
        # the operator ended the frozen session (and its group) before it launched the next
        assert in_groups(groups) == []
        st = finished(custom, name, timeout=400)
    finally:
        for pid in stalled:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert st["phase"] == "Succeeded" and st["resumes"] == 1 and st["attempts"] == 1, \
        (st, cond(st))
    every = set(session_pids("default", name)) | stalled
    wait_for("no session process of the run left", lambda: not in_groups(every), timeout=60)
