"""Board sessions as Kubernetes Jobs (issue 10, item 4) on the real API server and controllers.

The chart is installed with `sessions.launcher: job` into a namespace under the `restricted` pod
security standard, and its operator runs with exactly the installed Deployment's command, env and
ServiceAccount. A run makes it create, through its own RBAC: a Job that never retries, ends with
the run's timeout and whose pod the Job controller creates past restricted admission; a
ServiceAccount for that run owned by the Job; a Role and RoleBinding in the run's namespace owned
by the run. The light lab has no kubelet, so the test plays the node: it runs the Job's container
locally under a token of the session's own ServiceAccount; the run Succeeds, which proves that
account may do all a session needs, and `kubectl auth can-i` shows it may do nothing else.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

import benchfarm_devlab as devlab
from benchfarm.errors import InfraError
from benchfarm.lab.coordinator import Coordinator
from benchfarm.lab.labgrid_compat import TlsSettings
from benchfarm.lab.labgrid_pki import grant_uris
from benchfarm.settings import Settings
from tests.stack.chart import (
    CHART,
    create_restricted_namespace,
    helm,
    kubectl,
    lab_values,
    local_process,
    minio_secret,
    pod_command_env,
    service_account_kubeconfig,
    start_chart_operator,
    stop,
)
from tests.stack.conftest import apply, wait_for

pytestmark = pytest.mark.stack
NS = "benchfarm-jobs"
RELEASE = "bfj"


@pytest.fixture(scope="module")
def jobs_namespace(lab):
    create_restricted_namespace(NS)
    minio_secret(NS)
    return NS


def _can(verb: str, what: str, namespace: str, account: str, *extra: str) -> bool:
    res = kubectl("auth", "can-i", verb, what, "-n", namespace, f"--as={account}", *extra,
                  check=False)
    return res.stdout.strip() == "yes"


def _install(tmp_path, **sessions) -> None:
    """The chart afresh, sessions as Jobs (and `sessions`, e.g. warm=1), no TestPlans."""
    helm("uninstall", RELEASE, "-n", NS, "--wait", check=False)
    # the previous release's warm slots go with its session ConfigMap, in the background
    kubectl("delete", "jobs", "-n", NS, "-l", "benchfarm.io/warm-slot", "--wait=true",
            "--ignore-not-found", check=False)
    helm("install", RELEASE, str(CHART), "-n", NS, "--wait=false", "-f",
         str(lab_values(tmp_path, sessions={"launcher": "job", "jobTTLSeconds": 600, **sessions},
                        testPlans={"install": False})))


def _uninstall(*processes) -> None:
    """The played node's and the chart operator's processes stopped, the release gone, the lab's
    own operator back."""
    for process in processes:
        stop(process)
    helm("uninstall", RELEASE, "-n", NS, "--wait", check=False)
    devlab.start_operator()


def _run_to_its_end(custom, name: str, what: str) -> dict:
    """The run's status once it Succeeded or Failed (in `default`)."""
    def finished():
        st = custom.get_namespaced_custom_object("benchfarm.io", "v1alpha1", "default",
                                                 "benchmarkruns", name).get("status", {})
        return st if st.get("phase") in ("Succeeded", "Failed") else None
    return wait_for(what, finished, timeout=300, every=1)


def test_a_session_runs_as_a_job_under_an_account_of_its_own(jobs_namespace, kube, tmp_path):
    from kubernetes import client
    batch, core = client.BatchV1Api(kube), client.CoreV1Api(kube)
    rbac, custom = client.RbacAuthorizationV1Api(kube), client.CustomObjectsApi(kube)
    _install(tmp_path)
    operator = session = None
    try:
        operator = start_chart_operator(kube, NS, RELEASE, tmp_path)
        assert operator.env["BENCHFARM_LAUNCHER"] == "job"

        name = f"job-demo-{int(time.time())}"
        apply(yaml.safe_dump({"apiVersion": "benchfarm.io/v1alpha1", "kind": "BenchmarkRun",
                              "metadata": {"name": name, "namespace": "default"},
                              "spec": {"selector": {"deviceType": "qemu-x86"}, "plan": "demo",
                                       "bootCycles": 1, "timeoutSeconds": 900}}))
        run = custom.get_namespaced_custom_object("benchfarm.io", "v1alpha1", "default",
                                                  "benchmarkruns", name)
        uid = run["metadata"]["uid"]
        jobs = wait_for("the session's Job", lambda: batch.list_namespaced_job(
            NS, label_selector=f"benchfarm.io/run-uid={uid}").items, timeout=60)
        job = jobs[0]
        assert len(jobs) == 1 and job.metadata.name.startswith(f"{name}-{uid[:8]}-a1r0")
        assert job.spec.backoff_limit == 0
        assert 900 <= job.spec.active_deadline_seconds <= 900 + 120
        assert job.spec.ttl_seconds_after_finished == 600

        account = f"benchfarm-session-{uid}"
        pods = wait_for("the Job's pod, past restricted admission", lambda: core.list_namespaced_pod(
            NS, label_selector=f"job-name={job.metadata.name}").items, timeout=60)
        pod_spec = pods[0].spec
        assert pod_spec.service_account_name == account
        assert pod_spec.containers[0].command == ["benchfarm", "session", "run", f"default/{name}"]
        # the operator makes the Job the account's owner once the Job exists (its uid is known
        # only then): the Job controller may have made its pod before that patch lands
        owners = wait_for("the Job as the account's owner", lambda: core.read_namespaced_service_account(
            account, NS).metadata.owner_references, timeout=30)
        assert [(o.kind, o.uid) for o in owners] == [("Job", job.metadata.uid)]
        role = rbac.read_namespaced_role(account, "default")
        assert [(o.kind, o.uid) for o in role.metadata.owner_references] == [("BenchmarkRun", uid)]

        who = f"system:serviceaccount:{NS}:{account}"
        assert _can("get", f"benchmarkruns/{name}", "default", who)
        assert _can("patch", f"benchmarkruns/{name}", "default", who, "--subresource=status")
        assert not _can("get", "benchmarkruns/someone-elses-run", "default", who)
        assert not _can("patch", "benchmarkruns/someone-elses-run", "default", who,
                        "--subresource=status")
        assert not _can("list", "benchmarkruns", "default", who)
        assert not _can("get", "secrets", NS, who) and not _can("create", "jobs", NS, who)

        # play the node: the Job's container, locally, under a token of the session's account
        pod = kube.sanitize_for_serialization(job.spec.template.spec)
        pcommand, penv = pod_command_env(pod, NS, "session-0", tmp_path)
        # its labgrid certificate is its own, sealed in its env; of the operator's, only the CA
        assert "BENCHFARM_LABGRID_CERT" not in penv and "BENCHFARM_LABGRID_KEY" not in penv
        assert not {"BENCHFARM_LABGRID_ISSUER_CERT", "BENCHFARM_LABGRID_ISSUER_KEY"} & set(penv)
        assert sorted(p.name for p in Path(penv["BENCHFARM_LABGRID_CA"]).parent.iterdir()) == \
            ["ca.crt"]
        own = TlsSettings.from_settings(Settings.from_env(penv))
        assert own is not None and grant_uris(own.cert) == [
            f"labgrid:session:benchfarm/run-{uid}", f"labgrid:place:{penv['BENCHFARM_RUN_BOARD']}"]
        service_account_kubeconfig(kube, NS, account, tmp_path / "session.kubeconfig")
        session = local_process(pcommand, penv, tmp_path / "session.kubeconfig",
                                tmp_path / "session.log")

        st = _run_to_its_end(custom, name, "the run, its session a Job's container")
        assert st["phase"] == "Succeeded", st       # on the mTLS coordinator, with its own
        assert session.wait(timeout=60) == 0
        _takes_no_other_place(own, uid, penv["BENCHFARM_RUN_BOARD"])
        for log in (operator.log, tmp_path / "session.log"):
            text = log.read_text()
            assert "Forbidden" not in text and " 403" not in text, f"{log}:\n{text[-3000:]}"

        kubectl("delete", "benchmarkrun", name, "-n", "default", "--wait=true")
        wait_for("the session's Role to go with its run",
                 lambda: not rbac.list_namespaced_role(
                     "default", label_selector=f"benchfarm.io/run-uid={uid}").items, timeout=60)
        batch.delete_namespaced_job(job.metadata.name, NS, propagation_policy="Background")
        wait_for("the session's ServiceAccount to go with its Jobs",
                 lambda: not core.list_namespaced_service_account(
                     NS, label_selector=f"benchfarm.io/run-uid={uid}").items, timeout=60)
    finally:
        _uninstall(session, operator and operator.process)



def _takes_no_other_place(tls: TlsSettings, uid: str, board: str) -> None:
    """A Job session's certificate, used as its holder would, may acquire no other board."""
    other = next(b for b in ("vb-x86-1", "vb-x86-0") if b != board)
    lg = Coordinator(devlab.lab_env()["LG_COORDINATOR"], host="benchfarm", user=f"run-{uid}",
                     tls=tls, timeout=8)
    try:
        with pytest.raises(InfraError, match=f"may not acquire {other}"):
            lg.acquire(other)
    finally:
        lg.close()


@pytest.mark.full   # make test: runs as Jobs (above); health checks as processes (test_health_checks)
def test_a_health_check_runs_as_a_job_under_the_health_account(jobs_namespace, kube, tmp_path):
    """Issue 23 item 3, the Job path: a quarantined board's health check is a Job in the chart's
    namespace under the chart's health account; played as the node would, it boots the board,
    writes its verdict and the operator returns the board to service."""
    from kubernetes import client
    batch, core = client.BatchV1Api(kube), client.CoreV1Api(kube)
    custom = client.CustomObjectsApi(kube)
    board = "vb-x86-1"
    _install(tmp_path)
    operator = session = None
    try:
        # quarantined an hour ago, as a restarted operator reads it: its check is due at once
        devlab.stop_process("benchfarm-operator")
        wait_for(f"{board} free", lambda: (custom.get_cluster_custom_object(
            "benchfarm.io", "v1alpha1", "boards", board).get("status") or {}).get("state")
            in ("Idle", "Quarantined"), timeout=120)
        before = (custom.get_cluster_custom_object("benchfarm.io", "v1alpha1", "boards", board)
                  .get("status") or {}).get("healthCheck") or {}
        custom.patch_cluster_custom_object_status("benchfarm.io", "v1alpha1", "boards", board, {
            "status": {"state": "Quarantined", "reason": "BootFailed: a test's",
                       "consecutiveInfraFailures": 3, "run": None,
                       "quarantinedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                      time.gmtime(time.time() - 3600))}})
        operator = start_chart_operator(kube, NS, RELEASE, tmp_path)
        check = int(before.get("check") or 0) + 1

        jobs = wait_for("the health check's Job", lambda: batch.list_namespaced_job(
            NS, label_selector=f"benchfarm.io/health-check=true,benchfarm.io/board={board},"
                               f"benchfarm.io/check={check}").items, timeout=90)
        job = jobs[0]
        assert job.metadata.name.startswith(f"health-{board}-") and \
            job.metadata.name.endswith(f"-c{check}")
        assert job.spec.backoff_limit == 0
        pods = wait_for("the Job's pod, past restricted admission", lambda: core.list_namespaced_pod(
            NS, label_selector=f"job-name={job.metadata.name}").items, timeout=60)
        assert pods[0].spec.service_account_name == "benchfarm-health"
        assert pods[0].spec.containers[0].command == ["benchfarm", "session", "health", board,
                                                      str(check)]

        # play the node: the Job's container, locally, under a token of the health account
        pod = kube.sanitize_for_serialization(job.spec.template.spec)
        pcommand, penv = pod_command_env(pod, NS, "health-0", tmp_path)
        service_account_kubeconfig(kube, NS, "benchfarm-health", tmp_path / "health.kubeconfig")
        session = local_process(pcommand, penv, tmp_path / "health.kubeconfig",
                                tmp_path / "health.log")
        st = wait_for(f"{board} back in service", lambda: (lambda s: s if s.get("state") == "Idle"
                      else None)(custom.get_cluster_custom_object(
                          "benchfarm.io", "v1alpha1", "boards", board).get("status") or {}),
                      timeout=240, every=1)
        assert st["healthCheckEnd"]["check"] == check and \
            st["healthCheckEnd"]["verdict"] == "Passed", st
        assert st["consecutiveInfraFailures"] == 0
        assert session.wait(timeout=60) == 0
        for log in (operator.log, tmp_path / "health.log"):
            text = log.read_text()
            assert "Forbidden" not in text and " 403" not in text, f"{log}:\n{text[-3000:]}"
        batch.delete_namespaced_job(job.metadata.name, NS, propagation_policy="Background")
    finally:
        _uninstall(session, operator and operator.process)


def test_a_warm_slot_takes_a_run_and_may_touch_only_that_run(jobs_namespace, kube, tmp_path):
    """Issue 23 item 4: with `sessions.warm: 1` the operator keeps a slot (a Job, its own
    account that may read only its own ConfigMap); the test plays the node for the slot's pod
    (its container runs locally under a token of the slot's account, the pod is marked Running).
    A run applied then is given to that slot: no Job of its own, the run's Role bound to the slot's
    account, the grant signed in the slot's ConfigMap; the run Succeeds and a new slot replaces
    the one used."""
    from kubernetes import client
    batch, core = client.BatchV1Api(kube), client.CoreV1Api(kube)
    custom = client.CustomObjectsApi(kube)
    _install(tmp_path, warm=1)
    operator = slot_process = None
    try:
        operator = start_chart_operator(kube, NS, RELEASE, tmp_path)
        [job] = wait_for("a warm slot's Job", lambda: batch.list_namespaced_job(
            NS, label_selector="benchfarm.io/warm-slot,!benchfarm.io/granted").items, timeout=60)
        slot = job.metadata.name
        assert slot.startswith("benchfarm-warm-") and job.spec.active_deadline_seconds is None
        who = f"system:serviceaccount:{NS}:{slot}"
        wait_for("the slot's Role", lambda: _can("watch", f"configmaps/{slot}", NS, who),
                 timeout=30)
        assert not _can("get", "configmaps/benchfarm-fairness", NS, who)
        assert not _can("get", "benchmarkruns", "default", who)
        [pod] = wait_for("the slot's pod, past restricted admission", lambda: core.list_namespaced_pod(
            NS, label_selector=f"job-name={slot}").items, timeout=60)

        # play the node: the slot's container under a token of the slot's account, then Running
        spec = kube.sanitize_for_serialization(pod.spec)
        pcommand, penv = pod_command_env(spec, NS, pod.metadata.name, tmp_path)
        assert pcommand == ["benchfarm", "session", "warm"]
        service_account_kubeconfig(kube, NS, slot, tmp_path / "slot.kubeconfig")
        slot_process = local_process(pcommand, penv, tmp_path / "slot.kubeconfig",
                                     tmp_path / "slot.log")
        ready = tmp_path / pod.metadata.name / "tmp" / "benchfarm-warm-ready"
        wait_for("the slot's imports done (its readiness file)", ready.exists, timeout=120)
        kubectl("patch", "pod", "-n", NS, pod.metadata.name, "--subresource=status",
                "--type=merge", "-p", '{"status": {"phase": "Running"}}')

        name = f"warm-demo-{int(time.time())}"
        apply(yaml.safe_dump({"apiVersion": "benchfarm.io/v1alpha1", "kind": "BenchmarkRun",
                              "metadata": {"name": name, "namespace": "default"},
                              "spec": {"selector": {"deviceType": "qemu-x86"}, "plan": "demo",
                                       "bootCycles": 1, "timeoutSeconds": 900}}))
        uid = custom.get_namespaced_custom_object("benchfarm.io", "v1alpha1", "default",
                                                  "benchmarkruns", name)["metadata"]["uid"]

        st = _run_to_its_end(custom, name, "the run, its session the warm slot")
        assert st["phase"] == "Succeeded", st
        assert slot_process.wait(timeout=60) == 0
        text = (tmp_path / "slot.log").read_text()
        assert f"warm slot {slot} takes default/{name}" in text, text[-3000:]
        assert "Forbidden" not in text and " 403" not in text, text[-3000:]

        # the grant carried the run's own labgrid certificate, sealed; the slot's pod had the CA only
        grant = core.read_namespaced_config_map(slot, NS).data
        assert "PRIVATE KEY" not in grant["grant.json"]
        sealed = json.loads(grant["grant.json"])["env"]["BENCHFARM_LABGRID_SESSION"]
        own = TlsSettings.from_settings(Settings.from_env({"BENCHFARM_LABGRID_SESSION": sealed,
                                    "BENCHFARM_LABGRID_CA": penv["BENCHFARM_LABGRID_CA"],
                                    "BENCHFARM_SIGNING_KEY": penv["BENCHFARM_SIGNING_KEY"]}))
        assert own is not None and f"labgrid:session:benchfarm/run-{uid}" in grant_uris(own.cert)
        assert "BENCHFARM_LABGRID_CERT" not in penv
        run_jobs = batch.list_namespaced_job(NS, label_selector=f"benchfarm.io/run-uid={uid}")
        assert [j.metadata.name for j in run_jobs.items] == [slot]   # no cold Job
        granted = batch.read_namespaced_job(slot, NS)
        assert granted.metadata.labels["benchfarm.io/granted"] == "true"
        assert 900 <= granted.spec.active_deadline_seconds <= 900 + 120 + 300
        assert _can("get", f"benchmarkruns/{name}", "default", who)
        assert not _can("get", "benchmarkruns/someone-elses-run", "default", who)
        assert not _can("create", "leases", "default", who)       # the operator made its Lease
        wait_for("a new slot in place of the used one", lambda: batch.list_namespaced_job(
            NS, label_selector="benchfarm.io/warm-slot,!benchfarm.io/granted").items, timeout=30)
        kubectl("delete", "benchmarkrun", name, "-n", "default", "--wait=true")
    finally:
        _uninstall(slot_process, operator and operator.process)
