"""The job launcher's manifests: one Job per launch that never retries by itself, lives no longer
than the run's timeout, runs under restricted pod security and a ServiceAccount whose Role names
only its own run, its baseline and its Lease."""

from __future__ import annotations

import time
from types import SimpleNamespace

from benchfarm.api.models import BenchmarkRunSpec
from benchfarm.kube import jobs, sessions
from benchfarm.kube.launchers import Launch
from benchfarm.kube.state import RunState

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
    rt = SimpleNamespace(launcher=SimpleNamespace(launch=lambda r: got.append(r) or "job x"),
                         kube=SimpleNamespace(event=lambda *a: None))
    sup = sessions.Supervisor(rt)
    spec = BenchmarkRunSpec(selector={"deviceType": "qemu-x86"}, plan="demo",
                            timeoutSeconds=1000, baseline="base")
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 400))
    run = RunState("ns", "r", "u", 1, 0.0, spec, {"startTime": started})
    assert sup._launch(run, 1, 2) == "job x"
    assert 595 <= got[0].deadline_s <= 601 and got[0].reads == ("base",)
    assert got[0].resume == 2
    fresh = RunState("ns", "r2", "u2", 1, 0.0, spec, {})
    sup._launch(fresh, 1, 0)
    assert got[1].deadline_s == 1000.0 and got[1].reads == ("base",)


def test_a_launcher_that_fails_is_reported_not_raised():
    events = []
    def boom(r):
        raise RuntimeError("jobs.batch is forbidden")
    rt = SimpleNamespace(launcher=SimpleNamespace(launch=boom),
                         kube=SimpleNamespace(event=lambda *a: events.append(a)))
    spec = BenchmarkRunSpec(selector={"deviceType": "qemu-x86"}, plan="demo")
    handle = sessions.Supervisor(rt)._launch(RunState("ns", "r", "u", 1, 0.0, spec, {}), 1, 0)
    assert handle.startswith("not started") and "forbidden" in handle
    assert events[0][1:3] == ("Warning", "LaunchFailed")
