"""Issue 10, item 2: the one-node cluster of `benchfarm lab cluster-up` runs pods that reach the lab.

The cluster is brought up (or found up); a pod of a local image (built here with umoci, never
pulled) runs under the `restricted` pod security standard and calls the API server through the
`kubernetes` Service with its ServiceAccount token; another opens TCP connections to the
addresses the lab hands to pods (coordinator, MinIO, a board's serial server, the API server).
A cluster this test started is taken down again at the end, and nothing of it may remain: no
bridge, no iptables chain or rule, no mount, no process; and nothing that was there before goes
with it: another Kubernetes's chains (played by `FOREIGN`, made before cluster-up: names the
kubelet shares, a chain the old teardown deleted by name) stay as they were, rule for rule.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

import benchfarm_devlab as devlab
from benchfarm_devlab import cluster
from benchfarm_devlab.cluster.common import CGROUP_ROOT, MANIFEST, NODE_COMPONENTS
from benchfarm_devlab.cluster.node import cgroup_hierarchies
from benchfarm_devlab.cluster.teardown import our_shims
from benchfarm_devlab.config import SERVICE_IP
from tests.stack.conftest import wait_for

# the first test also brings the cluster up: on a cold machine that builds the kubelet (`make
# test` builds it before pytest; run alone, the build counts toward the first test's time)
# the one-node cluster (kubelet, kube-scheduler, kube-proxy built on first use: minutes cold):
# `make test-cluster` (BENCHFARM_FULL=1); `make test` tests the chart on the light lab
# (test_helm_chart, test_session_jobs play the node)
pytestmark = [pytest.mark.stack, pytest.mark.full, pytest.mark.timeout(1800)]
NS = "bf-cluster-test"
# Another Kubernetes's chains and rules on the same host: (command, table, chain, rule). An older
# kubelet's KUBE-MARK-DROP (deleted by name by the teardown before the manifest), and
# KUBE-FIREWALL, which this cluster's kubelet shares (it adds its own rules to it and jumps to it).
FOREIGN = [("iptables", "nat", "KUBE-MARK-DROP", "-j MARK --set-xmark 0x8000/0x8000"),
           ("iptables", "filter", "KUBE-FIREWALL", "-s 198.51.100.7/32 -j DROP"),
           ("iptables", "filter", "INPUT", "-s 198.51.100.8/32 -j KUBE-FIREWALL")]


def kubectl(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    res = devlab.kubectl(*args, input=input, check=False, capture=True)
    if check and res.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed:\n{res.stdout}\n{res.stderr}")
    return res


def iptables_lines() -> set[str]:
    """Every chain and rule of iptables and ip6tables, all tables."""
    out = set()
    for cmd in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle", "raw"):
            res = subprocess.run([cmd, "-w", "5", "-t", table, "-S"], capture_output=True, text=True)
            out |= {f"{cmd} {table}: {line}" for line in res.stdout.splitlines()
                    if line.startswith(("-N ", "-A "))}
    return out


def add_foreign() -> None:
    for cmd, table, chain, rule in FOREIGN:
        if chain.startswith("KUBE-"):
            subprocess.run([cmd, "-w", "5", "-t", table, "-N", chain], capture_output=True)
        subprocess.run([cmd, "-w", "5", "-t", table, "-A", chain, *rule.split()], check=True)


def remove_foreign() -> None:
    for cmd, table, chain, rule in reversed(FOREIGN):
        subprocess.run([cmd, "-w", "5", "-t", table, "-D", chain, *rule.split()], capture_output=True)
    for cmd, table, chain, _rule in FOREIGN:
        if chain.startswith("KUBE-"):
            subprocess.run([cmd, "-w", "5", "-t", table, "-X", chain], capture_output=True)


def leftovers(before: set[str]) -> list[str]:
    """What of the cluster is still on the machine (empty once it is down): also every iptables
    chain or rule that is not in `before`, the state before cluster-up."""
    out = []
    if Path(f"/sys/class/net/{cluster.BRIDGE}").exists():
        out.append(f"bridge {cluster.BRIDGE}")
    out += sorted(iptables_lines() - before)
    mounts = Path("/proc/self/mountinfo").read_text()
    out += [f"mount {line.split()[4]}" for line in mounts.splitlines()
            if line.split()[4].startswith(str(cluster.CLUSTER_DIR))]
    out += [f"process {name}" for name in NODE_COMPONENTS if devlab.running_pid(name)]
    out += [f"shim pid {pid}" for pid in our_shims()]
    out += [f"cgroup {h / CGROUP_ROOT}" for h in cgroup_hierarchies()
            if (h / CGROUP_ROOT).exists()]
    if cluster.CLUSTER_DIR.exists():
        out.append(f"directory {cluster.CLUSTER_DIR}")
    return out


@pytest.fixture(scope="module")
def node(lab):
    if os.geteuid() != 0:
        pytest.skip("the one-node cluster needs root (containerd, kubelet, a bridge)")
    was_up = cluster.is_up()
    if not was_up:
        add_foreign()
    before = iptables_lines()
    try:
        t0 = time.monotonic()
        times = cluster.up()
        print(f"\ncluster up in {time.monotonic() - t0:.1f} s: "
              + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))
        if not was_up:       # its kubelet did share the foreign KUBE-FIREWALL: it jumps to it
            assert "iptables filter: -A INPUT -j KUBE-FIREWALL" in iptables_lines() - before
        yield cluster.NODE
        # while every controller runs: the light lab's namespace controller may not delete pods
        kubectl("delete", "namespace", NS, "--ignore-not-found", "--timeout=60s", check=False)
        if not was_up:
            made = json.loads(MANIFEST.read_text())["iptables_created"]["iptables"]
            assert "KUBE-SERVICES" in made["nat"]["chains"], made     # kube-proxy's, recorded
            assert "-A INPUT -j KUBE-FIREWALL" in made["filter"]["rules"], made
            t0 = time.monotonic()
            cluster.down()
            print(f"\ncluster down in {time.monotonic() - t0:.1f} s")
            assert leftovers(before) == []
            assert sorted(before - iptables_lines()) == [], "removed what was there before"
    finally:
        if not was_up:
            remove_foreign()


@pytest.fixture(scope="module")
def namespace(node):
    wait_for(f"namespace {NS} of an earlier run to go", lambda: "Terminating" not in kubectl(
        "get", "namespace", NS, "--ignore-not-found", check=False).stdout, timeout=60)
    kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": NS, "labels": {"pod-security.kubernetes.io/enforce": "restricted",
                                            "pod-security.kubernetes.io/enforce-version": "latest"}}}))
    wait_for("the default ServiceAccount", lambda: kubectl(
        "-n", NS, "get", "serviceaccount", "default", check=False).returncode == 0, timeout=30)
    return NS


def restricted_pod(name: str, args: list[str]) -> str:
    """A pod of the local probe image that the `restricted` standard admits."""
    return json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
        "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "probe", "image": cluster.probe_image(), "imagePullPolicy": "IfNotPresent",
                "args": args,
                "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}},
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                              "limits": {"memory": "64Mi"}},
            }],
        }})


def run_pod(name: str, args: list[str]) -> tuple[str, float]:
    """Apply the pod, wait until it ends; its phase must be Succeeded. Returns (logs, seconds)."""
    kubectl("-n", NS, "delete", "pod", name, "--ignore-not-found", "--wait=true")
    t0 = time.monotonic()
    kubectl("apply", "-f", "-", input=restricted_pod(name, args))

    started: list[float] = []

    def phase() -> str | None:
        p = kubectl("-n", NS, "get", "pod", name, "-o",
                    "jsonpath={.status.phase} {.status.containerStatuses[0].state}", check=False)
        if not started and ('"running"' in p.stdout or '"terminated"' in p.stdout):
            started.append(time.monotonic() - t0)
        ph = p.stdout.split(" ")[0]
        return ph if ph in ("Succeeded", "Failed") else None
    end = wait_for(f"pod {name} to finish", phase, timeout=60, every=0.1)
    took = time.monotonic() - t0
    print(f"\n{name}: container running {started[0] if started else float('nan'):.1f} s after apply")
    logs = kubectl("-n", NS, "logs", name).stdout
    assert end == "Succeeded", f"pod {name} {end}:\n{logs}"
    return logs, took


def test_node_ready_with_the_lab_version(node):
    info = json.loads(kubectl("get", "node", node, "-o", "json").stdout)
    ready = [c for c in info["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True"
    assert info["status"]["nodeInfo"]["kubeletVersion"] == devlab.K8S_VERSION
    assert info["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    addresses = {a["type"]: a["address"] for a in info["status"]["addresses"]}
    assert addresses["InternalIP"] == cluster.HOST_ADDR


def test_restricted_pod_calls_the_api_through_the_kubernetes_service(namespace):
    logs, took = run_pod("api-probe", [])
    print(f"\napi-probe pod applied -> Succeeded in {took:.1f} s")
    assert f"ok api https://{SERVICE_IP}:443 as system:serviceaccount:{NS}:default" in logs, logs


def test_pod_reaches_the_lab_addresses(namespace):
    """Every relayed address; the boards' consoles and power switches are not among them: pods
    reach those through the exporter hosts' SSH (addrs["sshd"]), as every labgrid client does."""
    addrs = devlab.pod_addresses()
    wanted = [addrs["coordinator"], addrs["minio"], addrs["apiserver"], addrs["sshd"]]
    logs, took = run_pod("tcp-probe", ["tcp", *wanted])
    print(f"\ntcp-probe pod applied -> Succeeded in {took:.1f} s")
    for addr in wanted:
        assert f"ok tcp {addr}" in logs, logs


def test_what_pods_cannot_reach(namespace):
    """Only the relayed ports are on the pods' host address: etcd (no authentication) is not."""
    res = kubectl("apply", "-f", "-", input=restricted_pod(
        "etcd-probe", ["tcp", f"{cluster.HOST_ADDR}:{devlab.PORTS.etcd}"]))
    assert res.returncode == 0

    def phase() -> str | None:
        p = kubectl("-n", NS, "get", "pod", "etcd-probe", "-o", "jsonpath={.status.phase}", check=False)
        return p.stdout if p.stdout in ("Succeeded", "Failed") else None
    assert wait_for("pod etcd-probe to finish", phase, timeout=60, every=0.2) == "Failed"
    assert "FAIL tcp" in kubectl("-n", NS, "logs", "etcd-probe").stdout
