"""Issue 53 item 1 on the real stack: a team's CI holds a kubeconfig and nothing else.

The GitLab recipe of docs/howto/ci.md runs as written, its `benchmark` job's script step by step,
as a team's CI (`citenant.CiTenant`: a ServiceAccount token of the team's namespace, no
BENCHFARM_* variable at all): `benchfarm upload` puts the build into the team's folder of the
store with the namespace's own credential, which the operator issued into the namespace's Secret
`benchfarm-store`; `benchfarm submit` boots it and reads the results back the same way; the
JUnit and JSON files are the pipeline's. Three things differ from the page, for the embedded
lab: the board (the lab's arm64 board boots tenant kernels, its x86 one does not), the plan (one
quick step) and one iteration instead of five; the build job's artifact is the lab's own arm64
kernel build. Then that credential, tried on everything else: another namespace's objects and
the lab's `builds/` answer AccessDenied, deleting the Secret rotates it, and a deleted
namespace's key is refused within seconds.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import time
import uuid
from pathlib import Path

import kcidb_io
import pytest
import yaml
from junitparser import JUnitXml

import benchfarm_devlab as devlab
from benchfarm.settings import Settings
from tests.stack.citenant import CiTenant, apply_lab_policy, denied, let_in
from tests.stack.conftest import apply, wait_for

pytestmark = pytest.mark.stack

REPO = Path(__file__).resolve().parents[2]
PLAN = "stacktest-ci-tenant"
BUILD = "builds/qemu-arm64/debian-arm64/vmlinuz"     # devlab/builds.py publishes it
FOR_THE_LAB = {"--device-type qemu-x86": "--device-type qemu-arm64-a53",
               "--plan demo": f"--plan {PLAN}",
               "--iterations 5": "--iterations 1 --boot-cycles 1"}


def gitlab_job(name: str) -> dict:
    """A job of the GitLab recipe (the first ```yaml block after `## GitLab CI`)."""
    page = (REPO / "docs/howto/ci.md").read_text()
    section = page.split("## GitLab CI", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block, "docs/howto/ci.md: no yaml block under ## GitLab CI"
    return yaml.safe_load(block.group(1))[name]


def team_entries(team: CiTenant, other: CiTenant) -> list[dict]:
    return [{"namespace": team.ns, "allowSoftware": True}, {"namespace": other.ns}]


@pytest.fixture(scope="module")
def teams(lab, operator, tmp_path_factory):
    from benchfarm.store.artifacts import ArtifactStore, StoreConfig
    apply(yaml.safe_dump({"apiVersion": "benchfarm.io/v1alpha1", "kind": "TestPlan",
                          "metadata": {"name": PLAN}, "spec": {"suites": [
                              {"name": "release", "suite": "shell", "command": "uname -r",
                               "timeoutSeconds": 30}]}}))
    tag = uuid.uuid4().hex[:5]
    team = CiTenant(f"ci-team-{tag}", tmp_path_factory.mktemp("team"))
    other = CiTenant(f"ci-other-{tag}", tmp_path_factory.mktemp("other"))
    let_in(*team_entries(team, other))
    lab_store = ArtifactStore(StoreConfig.from_settings(Settings.from_env()))
    # what another team has in the store: a run's results and its own build
    victim = {f"{other.ns}/run-1/uid-1/metrics.json": b'{"metrics": []}',
              f"{other.ns}/ci/1/bzImage": b"team b's kernel"}
    for key, data in victim.items():
        lab_store.put(key, data)
    try:
        yield team, other, lab_store, victim
    finally:
        apply_lab_policy()
        devlab.kubectl("delete", "namespace", team.ns, other.ns, "--wait=false", capture=True)


def test_the_gitlab_recipe_runs_with_a_kubeconfig_and_nothing_else(teams):
    team, _, lab_store, _ = teams
    job = gitlab_job("benchmark")
    work = team.workdir / "job"
    (work / "arch/x86/boot").mkdir(parents=True)
    kernel = lab_store.get(BUILD)                       # the build job's artifacts
    (work / "arch/x86/boot/bzImage").write_bytes(kernel)
    (work / "bzImage.sha256").write_text(hashlib.sha256(kernel).hexdigest() + "\n")
    assert set(job["variables"]) == {"KUBECONFIG", "KEY"}, job["variables"]
    lines = [f'export {k}="{v}"' for k, v in job["variables"].items()]   # GitLab expands them
    for step in job["script"]:
        if step.startswith("pip install"):
            continue                                    # benchfarm is this tree's
        for page, lab in FOR_THE_LAB.items():
            step = step.replace(page, lab) if page in step else step
        lines.append(step.strip())
    script = "\n".join(lines)
    for lab in FOR_THE_LAB.values():
        assert lab in script, f"the recipe no longer says {lab!r}:\n{script}"
    res = subprocess.run(["sh", "-ec", script], cwd=work, text=True, capture_output=True,
                         timeout=900, env=team.env(
                             KUBECONFIG_LAB=str(team.kubeconfig), CI_PROJECT_NAME="linux",
                             CI_PIPELINE_ID="4242", CI_COMMIT_SHORT_SHA="0123abcd"))
    assert res.returncode == 0, f"{script}\n--- out\n{res.stdout[-4000:]}\n--- err\n{res.stderr[-4000:]}"
    url, digest = (work / "upload.txt").read_text().split()
    key = f"{team.ns}/ci/linux/4242/bzImage"
    assert url == f"s3://{lab_store.config.bucket}/{key}"
    assert digest == hashlib.sha256(kernel).hexdigest() == lab_store.sha256(key)
    summary = json.loads((work / "metrics.json").read_text())
    assert summary["exitCode"] == 0 and summary["blame"] is None, summary
    assert summary["run"].startswith(f"{team.ns}/"), summary
    suites = list(JUnitXml.fromfile(str(work / "junit.xml")))
    cases = {c.name for c in suites[0]}
    assert "release" in cases, cases                   # the step, from the run's metrics.json
    assert suites[0].failures == 0 and suites[0].errors == 0
    kcidb_io.schema.LATEST.validate(json.loads((work / "kcidb.json").read_text()))
    # and `report` / `export` the same way
    for args in (["report", summary["run"]], ["export", "kcidb", summary["run"]]):
        res = subprocess.run([str(devlab.VENV_BIN / "benchfarm"), *args], text=True,
                             capture_output=True, timeout=120, env=team.env())
        assert res.returncode == 0, (args, res.stderr)


def test_a_teams_credential_reaches_its_own_folder_only(teams):
    team, other, lab_store, victim = teams
    s3 = team.store()
    bucket = lab_store.config.bucket
    mine = f"{team.ns}/scratch/x"
    assert denied(lambda: s3.put_object(bucket, mine, io.BytesIO(b"x"), 1)) == "allowed"
    assert denied(lambda: s3.stat_object(bucket, mine)) == "allowed"
    assert denied(lambda: list(s3.list_objects(bucket, prefix=f"{team.ns}/"))) == "allowed"
    metrics, build = victim
    assert denied(lambda: s3.get_object(bucket, metrics)) == "AccessDenied"
    assert denied(lambda: s3.stat_object(bucket, build)) == "AccessDenied"
    assert denied(lambda: s3.put_object(bucket, metrics, io.BytesIO(b"{}"), 2)) == "AccessDenied"
    assert denied(lambda: s3.remove_object(bucket, build)) == "AccessDenied"
    assert denied(lambda: list(s3.list_objects(bucket, prefix=f"{other.ns}/"))) == "AccessDenied"
    assert denied(lambda: list(s3.list_objects(bucket, recursive=True))) == "AccessDenied"
    sums = BUILD.rsplit("/", 1)[0] + "/SHA256SUMS"
    before = lab_store.get(sums)
    assert denied(lambda: s3.put_object(bucket, sums, io.BytesIO(b"0" * 64), 64)) == "AccessDenied"
    assert denied(lambda: s3.put_object(bucket, BUILD, io.BytesIO(b"evil"), 4)) == "AccessDenied"
    assert lab_store.get(sums) == before and lab_store.get(metrics) == victim[metrics]
    # nor another namespace's credential, with the team's token
    res = team.kubectl("get", "secret", "benchfarm-store", "-n", other.ns)
    assert res.returncode != 0 and "Forbidden" in res.stderr, res.stderr


@pytest.fixture(scope="module", autouse=True)
def rotating(teams):
    """The other team's Secret deleted as the module starts: the operator issues it anew at its
    next check of every namespace (each minute), while the tests before the rotation's run
    (none of them uses that team's credential), not while the rotation's test waits."""
    _, other, _, _ = teams
    first = other.wait_for_credential()
    old = other.store()
    devlab.kubectl("delete", "secret", "benchfarm-store", "-n", other.ns, capture=True)
    return first, old


def test_deleting_the_secret_rotates_the_credential(teams, rotating):
    _, other, lab_store, _ = teams
    first, old = rotating
    bucket = lab_store.config.bucket
    fresh = wait_for("a new credential", lambda: (s := other.secret()) and
                     s["secretKey"] != first["secretKey"] and s, timeout=120, every=1)
    assert fresh["accessKey"] == first["accessKey"]
    key = f"{other.ns}/scratch/rotated"
    assert wait_for("the new key in force", lambda: denied(lambda: other.store().put_object(
        bucket, key, io.BytesIO(b"y"), 1)) == "allowed", timeout=30, every=1)
    assert denied(lambda: old.stat_object(bucket, key)) != "allowed"


def test_a_deleted_namespaces_key_is_refused_within_seconds(teams, tmp_path):
    """The operator sees the namespace being deleted (its watch of namespaces) and removes its
    store user then, not at its next check of every namespace (a minute), though the Secret
    outlives the namespace's deletion by seconds. What is asked is a PUT: the store's answer to
    a HEAD (stat_object) has no body, so the client calls any 403 AccessDenied, and an old test
    that waited for InvalidAccessKeyId there waited 240 s for an answer that cannot come."""
    team, other, lab_store, _ = teams
    bucket = lab_store.config.bucket
    gone = CiTenant(f"ci-gone-{uuid.uuid4().hex[:5]}", tmp_path)
    let_in(*team_entries(team, other), {"namespace": gone.ns})
    s3 = gone.store()
    key = f"{gone.ns}/x"

    def put() -> str:
        return denied(lambda: s3.put_object(bucket, key, io.BytesIO(b"x"), 1))
    assert put() == "allowed"
    start = time.monotonic()
    devlab.kubectl("delete", "namespace", gone.ns, "--wait=false", capture=True)
    wait_for("the deleted namespace's key refused", lambda: put() == "InvalidAccessKeyId",
             timeout=20, every=0.25)
    took = time.monotonic() - start
    assert denied(lambda: s3.stat_object(bucket, key)) == "AccessDenied"
    print(f"\nthe deleted namespace's key refused {took:.1f} s after the delete")
