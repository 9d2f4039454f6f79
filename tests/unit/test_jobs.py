"""The job launcher's manifests: one Job per launch that never retries by itself, lives no longer
than the run's timeout, runs under restricted pod security and a ServiceAccount whose Role names
only its own run, its baseline and its Lease; and a launch that finds objects of those names uses
them only if they are that run's own, never a Role or RoleBinding someone else made."""

from __future__ import annotations

import copy
import re
import time
from types import SimpleNamespace

import pytest
from kubernetes.client.rest import ApiException

from benchfarm.api.grants import SessionGrant
from benchfarm.api.runs import BenchmarkRunSpec
from benchfarm.core.policy import trust
from benchfarm.errors import InfraError, Outage, Party
from benchfarm.operator.launch import jobs, warm
from benchfarm.operator.launch.launchers import Launch
from benchfarm.operator.runs import sessions
from benchfarm.operator.state.records import RunState

UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
TEMPLATE = {"metadata": {"labels": {"app.kubernetes.io/component": "session"}},
            "spec": {"containers": [{"name": "session", "image": "benchfarm/operator:0.1.0",
                                     "args": ["operator"],
                                     "env": [{"name": "LG_COORDINATOR", "value": "c:20408"},
                                             {"name": "BENCHFARM_RUN_UID", "value": "stale"}]}]}}


def req(**kw) -> Launch:
    base = dict(namespace="team-a", name="Nightly.AM62x_boot", uid=UID, attempt=2, resume=1,
                deadline_s=599.2, reads=("last-week",), board="am62x-0")
    return Launch(**{**base, **kw})


def test_job_never_retries_and_ends_with_the_runs_timeout():
    job = jobs.job_manifest(req(), TEMPLATE, "benchfarm", ttl_s=3600)
    assert job["metadata"]["namespace"] == "benchfarm"
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["activeDeadlineSeconds"] == 600 + jobs.GRACE_S
    assert job["spec"]["ttlSecondsAfterFinished"] == 3600
    assert job["metadata"]["annotations"]["benchfarm.io/run"] == "team-a/Nightly.AM62x_boot"


def test_job_name_is_a_readable_unique_dns_label():
    name = jobs.job_name(req())
    assert name == "nightly-am62x-boot-0f1e2d3c-a2r1"
    long = jobs.job_name(req(name="x" * 63, attempt=12, resume=3))
    assert len(long) <= 57 and long.endswith("-a12r3")   # + "-xxxxx" for pod names <= 63
    assert jobs.job_name(req(resume=2)) != name


def test_pod_runs_the_session_of_its_run_under_its_own_account():
    job = jobs.job_manifest(req(), TEMPLATE, "benchfarm")
    pod = job["spec"]["template"]
    spec = pod["spec"]
    c = spec["containers"][0]
    assert c["command"] == ["benchfarm", "session", "run", "team-a/Nightly.AM62x_boot"]
    assert "args" not in c
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env == {"LG_COORDINATOR": "c:20408", "BENCHFARM_RUN_UID": UID,
                   "BENCHFARM_RUN_BOARD": "am62x-0"}
    assert spec["restartPolicy"] == "Never"
    assert spec["serviceAccountName"] == f"benchfarm-session-{UID}"
    labels = pod["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "session"
    assert labels["benchfarm.io/run-uid"] == UID and labels["benchfarm.io/resume"] == "1"
    assert TEMPLATE["spec"]["containers"][0]["args"] == ["operator"]   # template untouched


def test_pod_meets_the_restricted_standard_even_from_a_bare_template():
    spec = jobs.job_manifest(req(), TEMPLATE, "benchfarm")["spec"]["template"]["spec"]
    assert spec["securityContext"] == {"runAsNonRoot": True,
                                       "seccompProfile": {"type": "RuntimeDefault"}}
    csc = spec["containers"][0]["securityContext"]
    assert csc["allowPrivilegeEscalation"] is False and csc["capabilities"]["drop"] == ["ALL"]
    assert csc["readOnlyRootFilesystem"] is True


def test_role_names_only_the_run_its_baseline_and_its_lease():
    role = jobs.session_role(req())
    assert role["metadata"]["namespace"] == "team-a"
    owner = role["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("BenchmarkRun", "Nightly.AM62x_boot",
                                                             UID)
    by_resource = {}
    for rule in role["rules"]:
        for res in rule["resources"]:
            by_resource.setdefault(res, []).append((rule.get("resourceNames"), rule["verbs"]))
    assert by_resource["benchmarkruns"] == [(["Nightly.AM62x_boot", "last-week"],
                                             ["get", "list", "watch"])]
    assert by_resource["benchmarkruns/status"] == [(["Nightly.AM62x_boot"], ["get", "patch"])]
    named, create = by_resource["leases"]
    assert named == (["benchfarm-run-Nightly.AM62x_boot"], ["get", "update", "delete"])
    assert create == (None, ["create"])
    assert set(by_resource) == {"benchmarkruns", "benchmarkruns/status", "leases", "events"}
    binding = jobs.session_binding(req(), "benchfarm")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "namespace": "benchfarm",
                                    "name": f"benchfarm-session-{UID}"}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def test_supervisor_hands_the_launcher_what_is_left_of_the_timeout():
    got: list[Launch] = []
    from benchfarm.api.grants import Relay
    from benchfarm.core.policy import trust
    key = b"k" * 32
    rt = SimpleNamespace(launcher=SimpleNamespace(launch=lambda r: got.append(r) or "job x"),
                         kube=SimpleNamespace(event=lambda *a: None), signing_key=key)
    sup = sessions.Supervisor(rt)
    spec = BenchmarkRunSpec(selector={"deviceType": "qemu-x86"}, plan="demo",
                            timeoutSeconds=1000, baseline="base")
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 400))
    run = RunState("ns", "r", "u", 1, 0.0, spec, {"startTime": started})
    assert sup._launch(run, 1, 2) == "job x"
    assert 595 <= got[0].deadline_s <= 601 and got[0].reads == ("base",)
    assert got[0].resume == 2
    fresh = RunState("ns", "r2", "u2", 1, 0.0, spec,
                     {"goAhead": trust.sign_go_ahead(key, "u2", 1)})
    sup._launch(fresh, 1, 0)
    assert got[1].deadline_s == 1000.0 and got[1].reads == ("base",)
    standby = RunState("ns", "r3", "u3", 1, 0.0, spec, {})   # may wait its timeout for a seat
    sup._launch(standby, 1, 0)
    assert got[2].deadline_s == 2000.0
    relay = trust.sign_go_ahead(key, "u4", 1, Relay(place="b", holder="benchfarm/run-u2"))
    sup._launch(RunState("ns", "r4", "u4", 1, 0.0, spec, {"goAhead": relay}), 1, 0)
    assert got[3].deadline_s == 2000.0                       # a relay waits like a standby run


def test_a_launcher_that_fails_is_reported_not_raised():
    events = []
    def boom(r):
        raise ApiException(status=403, reason="jobs.batch is forbidden")
    rt = SimpleNamespace(launcher=SimpleNamespace(launch=boom), signing_key=b"k" * 32,
                         kube=SimpleNamespace(event=lambda *a: events.append(a)))
    spec = BenchmarkRunSpec(selector={"deviceType": "qemu-x86"}, plan="demo")
    handle = sessions.Supervisor(rt)._launch(RunState("ns", "r", "u", 1, 0.0, spec, {}), 1, 0)
    assert handle.startswith("not started") and "forbidden" in handle
    assert events[0][1:3] == ("Warning", "LaunchFailed")


class FakeKube:
    """The API server as the launcher sees it: objects by (kind, namespace, name), JSON bodies."""

    def __init__(self, *existing: dict) -> None:
        self.objects = {}
        self.replaced = []
        for obj in existing:
            self._put(obj)

    def _put(self, obj: dict) -> None:
        meta = obj["metadata"]
        meta.setdefault("uid", f"uid-{len(self.objects)}")
        meta["resourceVersion"] = str(int(meta.get("resourceVersion", "0")) + 1)
        self.objects[(obj["kind"], meta["namespace"], meta["name"])] = copy.deepcopy(obj)

    def create_namespaced(self, kind, namespace, body):
        if (kind, namespace, body["metadata"]["name"]) in self.objects:
            return False
        self._put(copy.deepcopy(body))
        return True

    def read_namespaced(self, kind, namespace, name):
        return copy.deepcopy(self.objects.get((kind, namespace, name)))

    def replace_namespaced(self, kind, namespace, name, body):
        assert body["metadata"]["resourceVersion"] == \
            self.objects[(kind, namespace, name)]["metadata"]["resourceVersion"]
        self.replaced.append((kind, name))
        self._put(copy.deepcopy(body))

    def patch_namespaced(self, kind, namespace, name, patch):
        obj = self.objects[(kind, namespace, name)]
        for key, value in patch.items():       # a merge patch, two levels deep
            for k, v in value.items():
                if isinstance(v, dict):
                    obj.setdefault(key, {}).setdefault(k, {}).update(v)
                else:
                    obj.setdefault(key, {})[k] = v

    def delete_namespaced(self, kind, namespace, name):
        self.objects.pop((kind, namespace, name), None)

    def list_namespaced(self, kind, namespace, labels):
        def match(obj):
            have = obj["metadata"].get("labels") or {}
            return all((term[1:] not in have) if term.startswith("!") else
                       have.get(term.partition("=")[0]) == term.partition("=")[2]
                       if "=" in term else term in have
                       for term in labels.split(","))
        return [copy.deepcopy(o) for (k, ns, _), o in self.objects.items()
                if k == kind and ns == namespace and match(o)]


def launcher(*existing: dict) -> jobs.JobLauncher:
    return jobs.JobLauncher(FakeKube(*existing), "benchfarm", TEMPLATE)


def test_a_launch_creates_role_binding_account_and_job_and_the_job_owns_the_account():
    lj = launcher()
    handle = lj.launch(req())
    account = f"benchfarm-session-{UID}"
    objs = lj.kube.objects
    assert {k[:2] for k in objs} == {("Role", "team-a"), ("RoleBinding", "team-a"),
                                     ("ServiceAccount", "benchfarm"), ("Job", "benchfarm")}
    job = objs[("Job", "benchfarm", jobs.job_name(req()))]
    assert handle == f"job benchfarm/{jobs.job_name(req())}"
    owners = objs[("ServiceAccount", "benchfarm", account)]["metadata"]["ownerReferences"]
    assert owners == [{"apiVersion": "batch/v1", "kind": "Job",
                       "name": job["metadata"]["name"], "uid": job["metadata"]["uid"]}]
    for key in objs:     # what the chart's admission policy lets the operator write
        labels = objs[key]["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "benchfarm"
        assert labels["benchfarm.io/run-uid"] == UID


def test_ending_a_run_session_deletes_its_running_jobs_and_no_other_runs():
    lj = launcher()
    lj.launch(req(resume=0))
    lj.launch(req(resume=1))
    done = jobs.job_name(req(resume=0))
    lj.kube.objects[("Job", "benchfarm", done)]["status"] = {"failed": 1}
    other = Launch("team-b", "x", "other-uid", 1, 0)
    lj.launch(other)
    what = lj.end(req(resume=1))
    left = {k[2] for k in lj.kube.objects if k[0] == "Job"}
    assert left == {done, jobs.job_name(other)}          # the finished one expires by its TTL
    assert jobs.job_name(req(resume=1)) in what
    assert lj.end(req(resume=1)) == "no session Job was running"


def test_a_resume_reuses_the_runs_own_grants_untouched():
    first = launcher()
    first.launch(req(resume=0))
    lj = jobs.JobLauncher(first.kube, "benchfarm", TEMPLATE)
    lj.launch(req(resume=1))
    assert lj.kube.replaced == []
    assert len([k for k in lj.kube.objects if k[0] == "Job"]) == 2


def test_the_runs_role_and_binding_changed_since_are_set_back():
    role, binding = jobs.session_role(req()), jobs.session_binding(req(), "benchfarm")
    role["rules"].append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]})
    binding["subjects"].append({"kind": "User", "name": "mallory"})
    lj = launcher(role, binding)
    lj.launch(req())
    assert lj.kube.replaced == [("Role", role["metadata"]["name"]),
                                ("RoleBinding", binding["metadata"]["name"])]
    objs = lj.kube.objects
    assert objs[("Role", "team-a", role["metadata"]["name"])]["rules"] == \
        jobs.session_role(req())["rules"]
    assert objs[("RoleBinding", "team-a", binding["metadata"]["name"])]["subjects"] == \
        jobs.session_binding(req(), "benchfarm")["subjects"]


@pytest.mark.parametrize("tamper, why", [
    (lambda o: o["metadata"].pop("labels"), "not labelled app.kubernetes.io/managed-by=benchfarm"),
    (lambda o: o["metadata"]["labels"].update({"benchfarm.io/run-uid": "other"}),
     "labelled for run uid 'other'"),
    (lambda o: o["metadata"].pop("ownerReferences"), "not owned by the run"),
])
def test_a_role_that_is_not_the_runs_refuses_the_launch(tamper, why):
    role = jobs.session_role(req())
    tamper(role)
    lj = launcher(role)
    with pytest.raises(InfraError, match=f"Role team-a/benchfarm-session-{UID} exists and is "
                                         f"not benchfarm's.*{re.escape(why)}") as err:
        lj.launch(req())
    assert err.value.reason == "ForeignSessionObject"
    kinds = {k[0] for k in lj.kube.objects}
    assert kinds == {"Role"} and lj.kube.replaced == []   # nothing bound, no account, no Job


def test_a_binding_of_another_role_refuses_the_launch_before_any_account_or_job():
    binding = jobs.session_binding(req(), "benchfarm")
    binding["roleRef"] = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                          "name": "admin"}
    lj = launcher(binding)
    with pytest.raises(InfraError, match="it binds ClusterRole admin, not the run's session Role"):
        lj.launch(req())
    assert {k[0] for k in lj.kube.objects} == {"Role", "RoleBinding"}
    assert lj.kube.replaced == []


def test_an_account_of_another_run_refuses_the_launch():
    sa = {"apiVersion": "v1", "kind": "ServiceAccount",
          "metadata": {"name": f"benchfarm-session-{UID}", "namespace": "benchfarm",
                       "labels": {"app.kubernetes.io/managed-by": "benchfarm"}}}
    lj = launcher(sa)
    with pytest.raises(InfraError, match="ServiceAccount benchfarm/.*labelled for run uid None"):
        lj.launch(req())
    assert not any(k[0] == "Job" for k in lj.kube.objects)


def test_a_refused_launch_is_a_lab_fault_event_on_the_run():
    events = []
    role = jobs.session_role(req())
    role["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "someone"
    rt = SimpleNamespace(launcher=launcher(role), signing_key=b"k" * 32,
                         kube=SimpleNamespace(event=lambda *a: events.append(a)))
    spec = BenchmarkRunSpec(selector={"deviceType": "qemu-x86"}, plan="demo")
    run = RunState("team-a", "Nightly.AM62x_boot", UID, 1, 0.0, spec, {})
    handle = sessions.Supervisor(rt)._launch(run, 1, 0)
    assert handle.startswith("not started") and "not benchfarm's" in handle
    assert events[0][1:3] == ("Warning", "LaunchFailed") and "lab fault" in events[0][3]


BOARD_UID = "9a8b7c6d-5e4f-3a2b-1c0d-ffeeddccbbaa"


def health(check: int = 3, board: str = "vb-x86.0") -> Launch:
    return Launch.health_check(board, BOARD_UID, check, "benchfarm", deadline_s=180.0)


def test_a_health_checks_job_runs_its_check_under_the_health_account_in_the_operators_namespace():
    job = jobs.job_manifest(health(), TEMPLATE, "benchfarm", health_account="bf-health")
    assert job["metadata"]["name"] == f"health-vb-x86-0-{BOARD_UID[:8]}-c3"
    assert job["metadata"]["namespace"] == "benchfarm"
    assert job["metadata"]["annotations"] == {"benchfarm.io/board": "vb-x86.0"}
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["activeDeadlineSeconds"] == 180 + jobs.GRACE_S
    spec = job["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "bf-health"
    c = spec["containers"][0]
    assert c["command"] == ["benchfarm", "session", "health", "vb-x86.0", "3"]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["BENCHFARM_BOARD_UID"] == BOARD_UID
    assert env["BENCHFARM_HEALTH_NAMESPACE"] == "benchfarm"
    assert "BENCHFARM_RUN_UID" not in env or env["BENCHFARM_RUN_UID"] == "stale"
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert labels["benchfarm.io/health-check"] == "true" and labels["benchfarm.io/check"] == "3"
    assert labels["benchfarm.io/board"] == "vb-x86.0" and "benchfarm.io/run-uid" not in labels
    assert jobs.job_name(health(check=4)) != job["metadata"]["name"]
    long = jobs.job_name(health(check=123, board="b" * 253))
    assert len(long) <= 57 and long.endswith("-c123")
    assert spec["containers"][0]["securityContext"]["allowPrivilegeEscalation"] is False


def test_a_health_check_launch_makes_only_its_job_no_grants():
    lj = launcher()
    handle = lj.launch(health())
    assert {k[:2] for k in lj.kube.objects} == {("Job", "benchfarm")}
    assert handle == f"job benchfarm/{jobs.job_name(health())}"
    job = next(iter(lj.kube.objects.values()))
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == jobs.HEALTH_ACCOUNT


def test_a_board_leases_end_is_a_job_under_the_health_account_with_no_grants():
    """The end of a BoardLease (power off, release) is a board-level session like a health
    check: the chart's health account, no Role, no run's account."""
    lj = launcher()
    req = Launch.lease_end("team-c", "debug-rt", BOARD_UID, "vb-x86-1")
    handle = lj.launch(req)
    job = lj.kube.objects[("Job", "benchfarm", jobs.job_name(req))]
    assert handle == f"job benchfarm/lease-end-debug-rt-{BOARD_UID[:8]}"
    spec = job["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == jobs.HEALTH_ACCOUNT
    c = spec["containers"][0]
    assert c["command"] == ["benchfarm", "session", "lease-end", "team-c/debug-rt"]
    assert {e["name"]: e["value"] for e in c["env"]}["BENCHFARM_LEASE_UID"] == BOARD_UID
    assert {k[:2] for k in lj.kube.objects} == {("Job", "benchfarm")}
    labels = job["metadata"]["labels"]
    assert labels["benchfarm.io/lease-uid"] == BOARD_UID and "benchfarm.io/run-uid" not in labels
# -- warm slots (operator/launch/warm.py) ---------------------------------------------------------------------
KEY = b"k" * 32


def warm_launcher(slots: int = 1) -> jobs.JobLauncher:
    lj = jobs.JobLauncher(FakeKube(), "benchfarm", TEMPLATE, warm_slots=slots, key=KEY)
    lj.reap()                                   # the operator's loop tops the pool up
    return lj


def running(lj: jobs.JobLauncher, slot: str) -> None:
    """The kubelet started the slot's pod."""
    lj.kube._put({"kind": "Pod", "metadata": {"name": f"{slot}-x7k2p", "namespace": "benchfarm",
                                              "labels": warm.slot_labels(slot)},
                  "status": {"phase": "Running"}})


def test_a_warm_slot_is_a_job_an_account_and_a_role_that_reads_only_its_own_configmap():
    lj = warm_launcher()
    [slot] = lj.warm.slots
    objs = lj.kube.objects
    assert {k for k in objs} == {(kind, "benchfarm", slot) for kind in
                                 ("ServiceAccount", "Job", "Role", "RoleBinding")}
    job = objs[("Job", "benchfarm", slot)]
    owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": slot,
              "uid": job["metadata"]["uid"]}]
    for kind in ("ServiceAccount", "Role", "RoleBinding"):   # they go with the Job
        assert objs[(kind, "benchfarm", slot)]["metadata"]["ownerReferences"] == owner
    assert objs[("Role", "benchfarm", slot)]["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [slot],
         "verbs": ["get", "list", "watch"]}]
    pod = job["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert pod["serviceAccountName"] == slot and c["command"] == ["benchfarm", "session", "warm"]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["BENCHFARM_WARM_SLOT"] == slot and env["BENCHFARM_NAMESPACE"] == "benchfarm"
    assert "activeDeadlineSeconds" not in job["spec"]       # set with the run's
    assert c["securityContext"]["readOnlyRootFilesystem"] is True


def test_a_launch_gives_a_running_slot_the_run_signed_and_bound_to_its_account():
    lj = warm_launcher(2)
    first, second = sorted(lj.warm.slots, key=lambda s: lj.warm.slots[s])
    running(lj, second)                  # the older one has no running pod yet: not taken
    handle = lj.launch(req())
    assert handle == f"job benchfarm/{second} (warm)"
    objs = lj.kube.objects
    role = objs[("Role", "team-a", jobs.account_name(UID))]
    assert not any("create" in r["verbs"] and r["resources"] == ["leases"] for r in role["rules"])
    binding = objs[("RoleBinding", "team-a", jobs.account_name(UID))]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": second,
                                    "namespace": "benchfarm"}]
    lease = objs[("Lease", "team-a", "benchfarm-run-Nightly.AM62x_boot")]
    assert lease["metadata"]["labels"]["benchfarm.io/run-uid"] == UID and lease["spec"] == {}
    job = objs[("Job", "benchfarm", second)]
    assert job["metadata"]["labels"][warm.GRANTED_LABEL] == "true"
    assert job["metadata"]["labels"]["benchfarm.io/run-uid"] == UID
    assert job["spec"]["activeDeadlineSeconds"] >= 600 + jobs.GRACE_S
    data = objs[("ConfigMap", "benchfarm", second)]["data"]
    grant = trust.read_grant(KEY, second, data)
    assert grant is not None and (grant.namespace, grant.name, grant.resume) == \
        ("team-a", "Nightly.AM62x_boot", 1)
    assert grant.env == req().env()          # the same identity a cold session gets
    assert trust.read_grant(KEY, first, data) is None          # for its own slot only
    assert trust.read_grant(b"x" * 32, second, data) is None   # signed by the operator only
    forged = {**data, "grant.json": data["grant.json"].replace("am62x-0", "am62x-1")}
    assert trust.read_grant(KEY, second, forged) is None
    assert list(lj.warm.slots) == [first]            # a slot serves one run
    lj.reap()
    assert len(lj.warm.slots) == 2                   # and is replaced


def test_without_a_running_slot_a_launch_is_a_cold_job():
    lj = warm_launcher()
    assert lj.launch(req()) == f"job benchfarm/{jobs.job_name(req())}"
    assert len(lj.warm.slots) == 1


def test_a_restarted_operator_finds_the_waiting_slots_not_the_granted_ones():
    lj = warm_launcher(2)
    taken = sorted(lj.warm.slots)[0]
    running(lj, taken)
    lj.launch(req())
    again = jobs.JobLauncher(lj.kube, "benchfarm", TEMPLATE, warm_slots=2, key=KEY)
    again.reap()
    assert taken not in again.warm.slots and len(again.warm.slots) == 2
    assert len([k for k in lj.kube.objects if k[0] == "Job"]) == 3


def test_slots_of_another_pod_template_are_deleted_not_given_runs():
    """After a `helm upgrade` (another image, another environment) the new leader finds the old
    slots: they are deleted and new ones made from the template it has now."""
    lj = warm_launcher(1)
    [old] = lj.warm.slots
    running(lj, old)
    upgraded = copy.deepcopy(TEMPLATE)
    upgraded["spec"]["containers"][0]["image"] = "benchfarm/operator:0.2.0"
    again = jobs.JobLauncher(lj.kube, "benchfarm", upgraded, warm_slots=1, key=KEY)
    again.reap()
    assert ("Job", "benchfarm", old) not in lj.kube.objects
    [new] = again.warm.slots
    job = lj.kube.objects[("Job", "benchfarm", new)]
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "benchfarm/operator:0.2.0"
    running(again, new)
    assert again.launch(req()) == f"job benchfarm/{new} (warm)"


def test_a_grant_sets_only_the_launchs_variables():
    with pytest.raises(ValueError, match="BENCHFARM_RUN_"):
        SessionGrant(slot="s", namespace="n", name="r", attempt=1, resume=0, deadline_s=60,
                     env={"BENCHFARM_RUN_UID": UID, "LD_PRELOAD": "/tmp/x.so"})


def test_a_health_check_never_takes_a_warm_slot():
    """A slot's pod runs runs; a check runs under the chart's health account, in a Job of its own."""
    lj = warm_launcher(1)
    [slot] = lj.warm.slots
    running(lj, slot)
    handle = lj.launch(health())
    assert "warm" not in handle and list(lj.warm.slots) == [slot]
    assert ("ConfigMap", "benchfarm", slot) not in lj.kube.objects


def test_a_slot_that_could_not_take_its_run_is_deleted_and_the_run_goes_cold():
    lj = warm_launcher(1)
    [slot] = lj.warm.slots
    running(lj, slot)

    def no_grant(req, job, env):
        raise Outage("the API server went away", party=Party.api)
    lj.warm.grant = no_grant                      # the slot's Job is marked, its grant never written
    assert lj.launch(req()) == f"job benchfarm/{jobs.job_name(req())}"
    assert ("Job", "benchfarm", slot) not in lj.kube.objects
