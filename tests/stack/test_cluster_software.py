"""Issue 23, items 1 and 2 on the real kubelet: what the embedded lab's sessions do, sessions in
Jobs of a helm install do too.

One helm install as `make demo-cluster` makes it (the image built from the Dockerfile, imported
into the one-node cluster's containerd; `ssh.existingSecret` names the lab's exporter SSH key, an
ssh_config for pods and a known_hosts pinning the lab sshd's host key), then several runs, each
in a session Job the kubelet runs under the `restricted` standard: the deploy-kernel example (the
kernel staged on the arm64 board's exporter over SSH + rsync from the pod, booted through U-Boot
and TFTP), the A/B example (both kernels staged, each side booting its own), and the low-power
example on the sigrok board (sigrok-cli of the image capturing the demo device's rails).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

import benchfarm_devlab as devlab
from benchfarm.settings import Settings
from benchfarm_devlab import cluster, democluster
from tests.stack.conftest import apply
from tests.stack.runs import cond, finished, get, run_yaml, unique
from tests.stack.test_gpu_power import _example, _metrics
from tests.stack.test_sigrok_rails import DTYPE, _device_type, _expected_mw

# on the one-node cluster: `make test-cluster` (BENCHFARM_FULL=1); cold, the image is built first
pytestmark = [pytest.mark.stack, pytest.mark.full, pytest.mark.timeout(2400)]
NS = democluster.NAMESPACE
EXAMPLES = Path(__file__).resolve().parents[2] / "testplans" / "examples"


def kubectl(*args: str) -> str:
    res = devlab.kubectl(*args, check=False, capture=True)
    assert res.returncode == 0, f"kubectl {' '.join(args)}: {res.stderr}"
    return res.stdout


def example(name: str, run_name: str, **spec) -> str:
    body = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    body["metadata"]["name"] = run_name
    body["spec"].update(spec)
    return yaml.safe_dump(body)


@pytest.fixture(scope="module")
def release(lab, kube):
    from kubernetes import client
    started = not cluster.is_up()
    cluster.up()
    devlab.apply_lab_policy()   # namespace default may boot the kernels published under builds/
    try:
        democluster.install({"replicas": 1})
        yield client.CustomObjectsApi(kube)
    finally:
        democluster.helm("uninstall", democluster.RELEASE, "-n", NS, "--wait", check=False)
        if started:
            cluster.down()
        devlab.start_operator()     # the lab's local operator again, for the tests after this one


def session_log(custom, name: str) -> str:
    """The logs of the run's one session Job (the kubelet ran it)."""
    uid = get(custom, name)["metadata"]["uid"]
    jobs = kubectl("get", "jobs", "-n", NS, "-l", f"benchfarm.io/run-uid={uid}", "-o",
                   "jsonpath={.items[*].metadata.name}").split()
    assert len(jobs) == 1, jobs
    return kubectl("logs", "-n", NS, f"job/{jobs[0]}")


def test_the_pods_ssh_secret_pins_the_host_key(release):
    secret = democluster.ssh_secret(NS, democluster.SSH_SECRET)["stringData"]
    assert "StrictHostKeyChecking yes" in secret["config"]
    assert "StrictHostKeyChecking no" not in secret["config"]
    host_key = (devlab.STATE / "ssh" / "host_ed25519.pub").read_text().split()[1]
    assert secret["known_hosts"].split()[2] == host_key
    assert f"{cluster.HOST_ADDR}]:{devlab.PORTS.sshd}" in secret["known_hosts"]


def test_runs_staging_software_and_measuring_sigrok_rails_succeed_in_session_jobs(release):
    custom = release
    deploy, ab, lowpower = unique("cdeploy"), unique("cab"), unique("clpsig")
    apply(example("deploy-kernel", deploy))
    apply(example("ab-kernels", ab, iterations=2))
    for doc in _example("low-power.yaml", lowpower, selector={"deviceType": DTYPE}):
        apply(doc)

    st = finished(custom, deploy, timeout=900)
    assert cond(st)["status"] == "True", st
    from benchfarm.store.artifacts import ArtifactStore, StoreConfig
    store = ArtifactStore(StoreConfig.from_settings(Settings.from_env()))
    published = store.get("builds/qemu-arm64/debian-cloud-arm64/SHA256SUMS").decode().split()[0]
    assert st["provenance"]["software"]["kernel"]["sha256"] == published
    assert st["provenance"]["kernelRelease"].endswith("-cloud-arm64"), st["provenance"]
    log = session_log(custom, deploy)
    assert "kernel staged as" in log, log
    # rsync'd over SSH from the pod (a local session only links the file it has)
    link = devlab.STATE / "tftp" / "vb-a53-0" / f"{published[:12]}-vmlinuz"
    assert os.readlink(link).startswith("/var/cache/labgrid/"), os.readlink(link)

    st = finished(custom, ab, timeout=900)
    assert cond(st)["status"] == "True", st
    assert cond(st, "Regressed")["reason"] in ("MetricsRegressed", "NoRegression"), st
    assert st["provenance"]["arm64"]["kernelRelease"].endswith("-arm64")
    assert st["provenance"]["cloud-arm64"]["kernelRelease"].endswith("-cloud-arm64")
    assert session_log(custom, ab).count("kernel staged as") >= 2

    st = finished(custom, lowpower, timeout=900)
    assert cond(st)["status"] == "True", st
    assert st["board"] == "vb-sigrok-0"
    values = {(s["step"], s["name"]): s["values"] for s in _metrics(custom, lowpower)["series"]}
    expected = _expected_mw(_device_type())
    for step in ("deep-sleep", "s2idle"):     # sigrok-cli of the image read the demo device
        for rail, mw in expected.items():
            for mode in ("active", step):
                got = values[(step, f"rail-{rail}-{mode}")]
                assert got[0] == pytest.approx(mw, rel=0.03), (step, rail, mode, got)
    session_log(custom, lowpower)      # one Job, the kubelet's


def test_lg_proxy_reaches_the_lab_through_the_ssh_secret(release):
    """LG_PROXY through the same Secret: the coordinator named as 127.0.0.1, which a pod reaches
    only through the proxy (its own loopback has no coordinator); the serial ports and the power
    switch are forwarded the same way. The operator's pod and the session's Job both connect."""
    custom = release
    democluster.helm("upgrade", democluster.RELEASE, str(democluster.CHART), "-n", NS,
                     "--reuse-values", "--set", f"labgrid.proxy={cluster.HOST_ADDR}",
                     "--set", f"labgrid.coordinator=127.0.0.1:{devlab.PORTS.coordinator}",
                     "--wait", "--timeout", "300s")
    name = unique("cproxy")
    apply(run_yaml(name, plan="demo", bootCycles=1, iterations=1, timeoutSeconds=600))
    st = finished(custom, name, timeout=600)
    assert cond(st)["status"] == "True", st
    uid = get(custom, name)["metadata"]["uid"]
    job = kubectl("get", "jobs", "-n", NS, "-l", f"benchfarm.io/run-uid={uid}", "-o",
                  "jsonpath={.items[0].spec.template.spec.containers[0].env}")
    assert f'"value":"{cluster.HOST_ADDR}"' in job and '"name":"LG_PROXY"' in job, job
