"""Issue 10, items 3, 4 and 6 on the real kubelet: benchfarm installed as `make demo-cluster`
installs it (the image built here from the Dockerfile and imported into containerd, `helm
install` with the chart's defaults: 2 operator replicas, board sessions as Jobs, a namespace that
enforces the `restricted` pod security standard), a BenchmarkRun applied with kubectl Succeeds on
a virtual board with its session in a Job the kubelet ran; deleting the leader operator pod in the
middle of that run hands over to the standby, the session Job keeps running (one Job, no resume)
and no finished step is written again; `helm upgrade` to another image tag while that run runs
and a second one waits for its board rolls both operator pods over and both runs Succeed; `helm
test` (benchfarm check in a pod of the release) passes before and after.
"""

from __future__ import annotations

import time

import pytest

import benchfarm_devlab as devlab
from benchfarm.settings import Settings
from benchfarm_devlab import cluster, democluster, image
from tests.stack.conftest import apply, wait_for
from tests.stack.runs import cond, finished, get, run_yaml, status, unique
from tests.stack.test_operator import custom  # noqa: F401

# The heaviest scenario of the suite (a cluster up, the image imported, two helm installs and an
# upgrade): `make demo-cluster` does the same install and runs, and `make test-full` runs this test;
# make test keeps the chart's Jobs on the real API server (test_session_jobs, test_cluster_software).
pytestmark = [pytest.mark.stack, pytest.mark.full,
              pytest.mark.timeout(1800)]   # cold: the image is built first
NS = democluster.NAMESPACE


def kubectl(*args: str):
    res = devlab.kubectl(*args, check=False, capture=True)
    assert res.returncode == 0, f"kubectl {' '.join(args)}: {res.stderr}"
    return res.stdout


def helm_test() -> str:
    """`helm test` of the release; on failure, what the check pod printed and how it ended."""
    res = democluster.helm("test", democluster.RELEASE, "-n", NS, "--logs", check=False)
    if res.returncode != 0:
        pod = devlab.kubectl("logs", "-n", NS, "benchfarm-check", check=False, capture=True)
        state = devlab.kubectl("get", "pod", "-n", NS, "benchfarm-check", "-o",
                               "jsonpath={.status.containerStatuses[0].state}", check=False,
                               capture=True)
        pytest.fail(f"helm test: {res.stderr.strip()}\n{res.stdout}\ncheck pod logs:\n"
                    f"{pod.stdout}{pod.stderr}\nstate: {state.stdout}")
    return res.stdout


def step_objects(custom, name):  # noqa: F811
    """key -> LastModified of the run's raw outputs and checkpoints in MinIO."""
    from benchfarm.store.artifacts import ArtifactStore, StoreConfig
    uid = get(custom, name)["metadata"]["uid"]
    store = ArtifactStore(StoreConfig.from_settings(Settings.from_env()))
    return {o.object_name: o.last_modified
            for sub in ("raw/", "checkpoints/")
            for o in store.client.list_objects(store.config.bucket,
                                               prefix=f"default/{name}/{uid}/{sub}", recursive=True)}


@pytest.fixture
def release(lab):
    started = not cluster.is_up()
    cluster.up()
    try:
        yield democluster.install()
    finally:
        democluster.helm("uninstall", democluster.RELEASE, "-n", NS, "--wait", check=False)
        if started:
            cluster.down()
        devlab.start_operator()     # the lab's local operator again, for the tests after this one


def test_helm_install_runs_a_session_job_and_survives_the_leader_pod(release, custom):  # noqa: F811
    assert democluster.ready_replicas() == 2
    first = wait_for("a leader", democluster.leader, timeout=60)
    pods = democluster.operator_pods()
    assert first in pods and len(pods) == 2
    name = unique("cluster")
    test = helm_test()
    assert "ok    labgrid" in test and "FAIL" not in test, test
    # Long enough to be running through the takeover, the image import and the rollout (about
    # 67 s from apply here; this run lasts ~140 s): the demo plan's 3 iterations ended first.
    apply(run_yaml(name, plan="stacktest-slow", bootCycles=2, iterations=5, timeoutSeconds=600,
                   selector={"board": "vb-x86-0"}))
    applied = time.monotonic()
    uid = wait_for("the run's uid", lambda: get(custom, name)["metadata"]["uid"])
    before = wait_for("the first checkpoint", lambda: step_objects(custom, name), timeout=180,
                      every=0.25)
    kubectl("delete", "pod", "-n", NS, first, "--wait=false")
    deleted = time.monotonic()
    second = wait_for("the standby to lead", lambda: (democluster.leader() or first) != first
                      and democluster.leader(), timeout=30, every=0.25)
    takeover = time.monotonic() - deleted
    wait_for("the deleted leader pod to go", lambda: first not in democluster.operator_pods(True),
             timeout=60)
    gone = time.monotonic() - deleted
    queued = unique("queued")      # waits for the same board while the operators roll over
    apply(run_yaml(queued, plan="stacktest-fast", bootCycles=1, timeoutSeconds=600,
                   selector={"board": "vb-x86-0"}))
    img = image.build()
    cluster.import_image(img.archive, f"{img.name}-upgrade")
    rolled = time.monotonic()
    democluster.helm("upgrade", democluster.RELEASE, str(democluster.CHART), "-n", NS,
                     "--reuse-values", "--set", f"image.tag={img.ref.split(':')[1]}-upgrade",
                     "--wait", "--timeout", "300s")
    # every pod of the old image gone, the standby that replaced the deleted leader too
    wait_for("the old operator pods to go", lambda: not set(pods) & set(
        democluster.operator_pods(True)) and len(democluster.operator_pods(True)) == 2,
        timeout=120)
    rollout = time.monotonic() - rolled
    print(f"\nrollout done {time.monotonic() - applied:.1f} s after the run was applied")
    assert status(custom, name).get("phase") == "Running", "the run ended before the rollout"
    new_pods = democluster.operator_pods()
    assert len(new_pods) == 2 and all(p.endswith(q) is False for p in new_pods for q in pods)
    try:
        # the last old pod to go may have led: its Lease is released on a clean stop, or
        # expires 10 s after a stop that was not clean; a standby retries every 2 s
        led = wait_for("a leader of the new pods", lambda: democluster.leader() in new_pods
                       and democluster.leader(), timeout=60)
    except AssertionError:
        print(kubectl("get", "pods", "-n", NS, "-o", "wide"),
              kubectl("get", "lease", "-n", NS, "-o", "yaml"),
              *(kubectl("logs", "-n", NS, p, "--tail=30") for p in new_pods))
        raise
    handover = time.monotonic() - rolled - rollout
    st = finished(custom, name, timeout=400)
    assert cond(st)["status"] == "True", st
    assert second in pods and takeover < 15
    jobs = kubectl("get", "jobs", "-n", NS, "-l", f"benchfarm.io/run-uid={uid}", "-o",
                   "jsonpath={range .items[*]}{.metadata.name} {.status.succeeded}{'\\n'}{end}")
    assert len(jobs.splitlines()) == 1, jobs            # one Job: the session was never relaunched
    job = jobs.split()[0]
    wait_for("the session Job Complete", lambda: kubectl(
        "get", "job", "-n", NS, job, "-o",
        "jsonpath={.status.conditions[?(@.type=='Complete')].status}") == "True", timeout=60)
    assert st.get("attempts") == 1 and not st.get("resumes"), st
    after = step_objects(custom, name)
    assert {k: v for k, v in after.items() if k in before and before[k] != v} == {}
    assert any("metrics.json" in a for a in st["artifacts"])
    logs = kubectl("logs", "-n", NS, f"job/{job}")
    assert f"default/{name}: iteration" in logs, logs
    assert cond(finished(custom, queued, timeout=400))["status"] == "True"
    test = helm_test()
    assert "FAIL" not in test and "ok    leader" in test, test
    print(f"\nhelm install -> 2 replicas Ready {release:.1f} s; helm upgrade -> old pods gone "
          f"{rollout:.1f} s with a run running and one queued, {led} leads {handover:.1f} s later; "
          f"leader {first} deleted, "
          f"{second} leads after {takeover:.1f} s, the pod gone after {gone:.1f} s; session Job {job} Complete")
