"""Issue 11 on the real stack: the software under test deployed through labgrid's TFTP provider
and U-Boot on the arm64 board, A/B runs of two kernel builds, and bad software that fails the run
without charging the board."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import benchfarm_devlab as devlab
from benchfarm.settings import Settings
from tests.conftest import FULL
from tests.stack.conftest import apply, wait_for
from tests.stack.runs import GROUP, VERSION, cond, finished, unique

pytestmark = pytest.mark.stack

EXAMPLES = Path(__file__).resolve().parents[2] / "testplans" / "examples"
PLAN = """
apiVersion: benchfarm.io/v1alpha1
kind: TestPlan
metadata: {name: stacktest-kernel}
spec:
  suites:
    - {name: release, suite: shell, command: uname -r, timeoutSeconds: 30}
    - {name: hackbench, suite: hackbench, command: hackbench -g 2 -l 50, timeoutSeconds: 120}
"""


@pytest.fixture(scope="module")
def custom(kube, operator):
    from kubernetes import client
    apply(PLAN)
    devlab.apply_lab_policy()   # namespace default may boot the kernels published under builds/
    return client.CustomObjectsApi(kube)


def example(name: str, run_name: str, **spec) -> str:
    body = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    body["metadata"]["name"] = run_name
    body["spec"].update(spec)
    return yaml.safe_dump(body)


def board(custom, name="vb-a53-0"):
    return custom.get_cluster_custom_object(GROUP, VERSION, "boards", name).get("status", {})


def booted_published_cloud_kernel(custom, name: str) -> tuple[dict, str]:
    """The run Succeeded, booting the kernel published under builds/ (its digest, its release)
    twice, timed through U-Boot: its provenance and the published digest."""
    st = finished(custom, name, timeout=600)
    assert cond(st)["status"] == "True", st
    prov = st["provenance"]
    from benchfarm.store.artifacts import ArtifactStore, StoreConfig
    store = ArtifactStore(StoreConfig.from_settings(Settings.from_env()))
    published = store.get("builds/qemu-arm64/debian-cloud-arm64/SHA256SUMS").decode().split()[0]
    assert prov["software"]["kernel"]["sha256"] == published
    assert prov["kernelRelease"].endswith("-cloud-arm64"), prov     # the deployed one booted
    boot = st["results"]["boot"]
    assert boot["phase"] == "kernel-to-prompt" and boot["n"] == 2   # TI: Starting kernel -> prompt
    prefix = next(u for u in st["artifacts"] if u.endswith("/metrics.json"))
    doc = yaml.safe_load(store.get(prefix.split("/", 3)[3]))
    assert {"bootloader-stage", "kernel-to-prompt"} <= set(doc["bootSummary"])
    return prov, published


@pytest.mark.full
def test_the_deploy_kernel_example_boots_the_published_kernel_through_u_boot(custom):
    """The example as written (the demo plan, two iterations); make test boots the same kernel
    with a short plan and without boot arguments (below)."""
    name = unique("deploy")
    apply(example("deploy-kernel", name))
    prov, published = booted_published_cloud_kernel(custom, name)
    assert "benchfarm.build=cloud-arm64" in prov["cmdline"]
    assert devlab.STATE.joinpath("tftp", "vb-a53-0", f"{published[:12]}-vmlinuz").is_symlink()


def test_a_kernel_deployed_without_boot_arguments_boots_to_the_prompt(custom):
    """spec.software with a kernel and no bootArgs: U-Boot boots it with the board's own command
    line (issue 42: a plain deployed kernel once reached userspace but no prompt)."""
    name = unique("plain")
    body = yaml.safe_load(example("deploy-kernel", name, plan="stacktest-kernel", iterations=1))
    del body["spec"]["software"]["bootArgs"]
    apply(yaml.safe_dump(body))
    prov, _ = booted_published_cloud_kernel(custom, name)
    assert "bootArgs" not in prov["software"]
    assert "benchfarm.build" not in prov["cmdline"] and "benchfarm.board=vb-a53-0" in prov["cmdline"]


def test_an_ab_run_alternates_two_kernels_and_judges_b_against_a(custom):
    """Two iterations a side in the full variant (A, B, A, B); one in make test (A, B)."""
    name = unique("ab")
    iterations = 2 if FULL else 1
    apply(example("ab-kernels", name, plan="stacktest-kernel", iterations=iterations))
    st = finished(custom, name, timeout=900)
    assert cond(st)["status"] == "True", st
    verdict = cond(st, "Regressed")
    assert verdict["status"] in ("True", "False") and verdict["reason"] in (
        "MetricsRegressed", "NoRegression"), verdict
    assert "B (cloud-arm64)" in verdict["message"] or "compared" in verdict["message"]
    assert set(st["results"]) == {"arm64", "cloud-arm64"}
    assert st["provenance"]["arm64"]["kernelRelease"].endswith("-arm64")
    assert st["provenance"]["cloud-arm64"]["kernelRelease"].endswith("-cloud-arm64")
    from benchfarm.store.artifacts import ArtifactStore, StoreConfig
    store = ArtifactStore(StoreConfig.from_settings(Settings.from_env()))
    report_url = next(u for u in st["artifacts"] if u.endswith("/report.md"))
    report = store.get(report_url.split("/", 3)[3]).decode()
    assert "## A/B: B (cloud-arm64) against A (arm64)" in report
    # each side's iterations ran its own kernel (raw outputs by side: raw/release/a/, b/)
    raw = report_url.split("/", 3)[3].rsplit("/", 1)[0] + "/raw/release/"
    releases = {k[len(raw):]: store.get(k).decode().strip().splitlines()[-1]
                for k in store.list(raw)}
    assert sorted(releases) == [f"{side}/iteration-{i:03d}.txt" for side in "ab"
                                for i in range(1, iterations + 1)], releases
    assert all(v.endswith("-cloud-arm64") == k.startswith("b/") for k, v in releases.items())


@pytest.fixture(scope="module")
def own(custom):
    """A folder of the namespace's own prefix in the lab's store (http(s) from this machine is
    loopback, which no run may reach), holding a file that is no kernel."""
    from benchfarm.store.artifacts import ArtifactStore, StoreConfig
    store = ArtifactStore(StoreConfig.from_settings(Settings.from_env()))
    store.put("default/stacktest-builds/Image", b"not a kernel")
    return f"s3://{store.config.bucket}/default/stacktest-builds"


@pytest.mark.parametrize("kernel, reason", [
    (lambda own: {"url": "s3://benchfarm-artifacts/builds/qemu-arm64/debian-cloud-arm64/vmlinuz",
                  "sha256": "0" * 64}, "DigestMismatch"),
    (lambda own: {"url": f"{own}/no-such-build/Image", "sha256": "0" * 64}, "ArtifactUnavailable"),
])
def test_bad_software_fails_the_run_with_a_reason_and_leaves_the_board_uncharged(
        custom, own, kernel, reason):
    failures = board(custom).get("consecutiveInfraFailures", 0)
    name = unique("badsw")
    apply(example("deploy-kernel", name, plan="stacktest-kernel", bootCycles=1, iterations=1,
                  software={"kernel": kernel(own)}))
    st = finished(custom, name, timeout=300)
    assert st["phase"] == "Failed" and cond(st)["reason"] == reason, st
    assert "kernel" in cond(st)["message"]
    assert st.get("attempts", 1) == 1          # not moved to another board: not the board's fault
    assert board(custom).get("consecutiveInfraFailures", 0) == failures
    wait_for("vb-a53-0 idle again", lambda: board(custom).get("state") == "Idle", timeout=60)


@pytest.mark.full   # make test: test_submit's exit 3 is this run, through benchfarm submit
def test_a_kernel_that_never_starts_is_the_runs_error_not_the_boards(custom, own):
    """U-Boot loads it and refuses it ("Bad Linux ARM64 Image magic"): no Starting kernel."""
    import hashlib
    digest = hashlib.sha256(b"not a kernel").hexdigest()
    failures = board(custom).get("consecutiveInfraFailures", 0)
    name = unique("nokernel")
    apply(example("deploy-kernel", name, plan="stacktest-kernel", bootCycles=1, iterations=1,
                  software={"kernel": {"url": f"{own}/Image", "sha256": digest}}))
    st = finished(custom, name, timeout=300)
    assert st["phase"] == "Failed" and cond(st)["reason"] == "SoftwareBootFailed", st
    assert st.get("attempts", 1) == 1
    assert board(custom).get("consecutiveInfraFailures", 0) == failures
