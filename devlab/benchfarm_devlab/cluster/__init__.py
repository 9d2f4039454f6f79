"""A one-node Kubernetes cluster in the embedded lab: `benchfarm lab cluster-up` / `cluster-down`.

Why it exists: the operator's real home is a cluster (`helm install`, its pods under the
`restricted` pod security standard, board sessions as Jobs), and the light lab has no node.
`cluster-up` adds one next to the control plane `lab up` already runs, and nothing else changes
for the light lab: containerd (Debian package; its own config, root, state, socket and runc root
under `.benchfarm/cluster/`), a kubelet, kube-scheduler and kube-proxy (iptables mode) built from
the Go module proxy like the control plane (`hack/build-binaries.sh kubernetes_node`, first use
only), pods on a local bridge with the CNI bridge + host-local + loopback plugins, and a local
sandbox ("pause") image: nothing is ever pulled from a registry (`import_image` brings in an OCI
archive, e.g. the operator image; tag it with a version, pull policy IfNotPresent). The sandbox
image is a static Go program (devlab/images/pause) that blocks and exits 0 on SIGTERM (busybox
`sleep` as PID 1 ignores SIGTERM, so every pod would wait out its grace period); the tests' probe
image (devlab/images/probe) is built the same way: umoci init/new/insert/config, tar of the OCI
layout, `ctr images import`, tagged with the binary's digest.

Order and times (warm, on 2 cores): bridge + relay, containerd (0.1 s), images, the
controller-manager restarted with every controller, kube-scheduler, the kubelet (Node Ready in
about 1 s), then kube-proxy, which would wait 30 s for a Node that does not exist yet; about
5 s in all. Pods start about 1.5 s after they are applied.

Addresses (all on this machine; ip_forward is left as it is, off here, so pods cannot reach past
the host, their packets never leave it, and nothing outside reaches the pods):
- pods: `config.POD_CIDR` on the bridge `bf<port base>`; the bridge's own address
  `config.HOST_ADDR` is "the host" for pods, the Node's InternalIP and the kubelet's listen
  address. An INPUT rule (chain `BF<port base>-GUARD`) drops packets for HOST_ADDR that arrive
  on any other interface than the bridge or lo, so the host address is not reachable from the
  network.
- the API server: pods call the `kubernetes` Service (`config.SERVICE_IP`:443, in the serving
  certificate with HOST_ADDR); the API server runs with `--endpoint-reconciler-type=none`, so
  cluster-up writes its EndpointSlice by hand: HOST_ADDR:<apiserver port>; kube-proxy DNATs to it.
- the lab's services (labgrid coordinator, MinIO, the API server, and the gate of the lab
  network, the exporter hosts' SSH: labnet.py) keep listening on 127.0.0.1; a relay
  (`relay.py`, component `lab-gateway`) listens on HOST_ADDR at the same port numbers and copies
  each connection to 127.0.0.1. So a pod uses `HOST_ADDR:<port>` where a local process uses `127.0.0.1:<port>`
  (`pod_addresses()`). Why a relay and not a DNAT to 127.0.0.1 (with route_localnet on the
  bridge): an EndpointSlice may not hold a loopback address, and a packet kube-proxy has already
  DNATed to HOST_ADDR is not NATed again, so the API server needs a real listener on HOST_ADDR
  anyway; moving the API server (or all listeners) to HOST_ADDR would change every kubeconfig and
  make `lab up` need root and a network interface. One small relay serves every port alike, adds
  no rule that opens 127.0.0.1 to pods, and goes away with the cluster.
- serial ports and power switches are in the lab network (labnet.py), not on the host: the
  exporters run `--isolated` and every labgrid client, a pod's too, forwards through the
  exporter host's SSH. A pod's ssh_config (sshd.pod_files) leads the exporter hosts' names to
  HOST_ADDR:<sshd port>, the relay to the gate; the exporters publish the same resources
  whether the cluster runs or not.
- left as it is: a pod reaches, on HOST_ADDR, whatever on the host listens on all addresses
  (nothing of the lab's own); and a Service whose endpoints are pods (not needed so
  far: the operator's pods only call out) needs forwarding between pods on the bridge, i.e.
  ip_forward=1 with a FORWARD rule that accepts bridge-to-bridge traffic only.

One cluster per machine: kube-proxy and the kubelet own iptables chains of fixed names
(`KUBE-SERVICES`, ...), so cluster-up refuses to start while another lab's cluster runs
(`/run/benchfarm-cluster.owner`).

Teardown removes what this cluster made and nothing else. Before it starts anything, cluster-up
writes `manifest.json` in its directory: the iptables and ip6tables chains and rules already there
(every table), the kernel settings the kubelet changes, which of the shared files and directories
exist, whether the bridge exists; after the node is up it adds what appeared (chains, rules) and
the processes it started. `cluster-down` (also run by `lab down`) removes: its pods and containers,
those processes (and containerd's shims of its socket), the iptables rules and `KUBE-*` chains that
were not there before cluster-up (rules first, wherever they are, then the chains; a chain or rule
that was there stays, even in a chain its kubelet shared), the guard chain, the bridge if it made
it, mounts under its directories (unmounted before removal), the cgroups under its cgroup root,
the files it left in /run/containerd, /var/lib/cni, /var/log/containers and
/var/lib/kubelet/device-plugins (only those that were not there before), the directories it
created there, the kernel settings put back, the Node, the EndpointSlice and its RBAC binding; and
puts the controller-manager back to the light lab's controllers. `kube-proxy --cleanup` is never
run: it deletes every chain of kube-proxy's names, another Kubernetes's too. Left as it is: a
running kube-proxy deletes per-Service chains (`KUBE-SVC-*`, `KUBE-SEP-*` in nat) it does not
know, whoever made them; that is why one Kubernetes per machine is the rule.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from benchfarm_devlab.binaries import binaries
from benchfarm_devlab.cluster.common import NODE, OWNER, ctr
from benchfarm_devlab.cluster.images import build_image, check_packages, import_image, node_binaries
from benchfarm_devlab.cluster.network import network_up, start_gateway
from benchfarm_devlab.cluster.node import (
    start_containerd,
    start_kube_proxy,
    start_kubelet,
    start_scheduler,
)
from benchfarm_devlab.cluster.teardown import cleanup_host, our_shims, record_after, record_before
from benchfarm_devlab.config import BRIDGE, CLUSTER_DIR, HOST_ADDR, PORTS, STATE, LabError, say
from benchfarm_devlab.controlplane import start_controller_manager
from benchfarm_devlab.env import kubectl
from benchfarm_devlab.processes import running_pid, stop_process

CLUSTER_OBJECTS = f"""apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: benchfarm-lab:apiserver-kubelet-client}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:kubelet-api-admin}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: kube-apiserver-kubelet-client}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kubernetes-benchfarm-lab
  namespace: default
  labels:
    kubernetes.io/service-name: kubernetes
    endpointslice.kubernetes.io/managed-by: benchfarm-lab
addressType: IPv4
endpoints: [{{addresses: ["{HOST_ADDR}"], conditions: {{ready: true}}}}]
ports: [{{name: https, port: {PORTS.apiserver}, protocol: TCP}}]
"""


def is_up() -> bool:
    return running_pid("kubelet") is not None


def _claim_machine() -> None:
    try:
        owner = OWNER.read_text().strip()
    except OSError:
        owner = ""
    if owner and owner != str(STATE):
        other = Path(owner) / "pids" / "kube-proxy.pid"
        try:
            alive = Path(f"/proc/{int(other.read_text())}").exists()
        except (OSError, ValueError):
            alive = False
        if alive:
            raise LabError(f"cluster: another lab's cluster runs on this machine (state {owner});"
                           " one cluster per machine: kube-proxy's iptables chains are global."
                           " Stop it with `make cluster-down` there")
    OWNER.write_text(str(STATE))


def up() -> dict[str, float]:
    """Start the node next to the running lab; idempotent. Returns the timings (seconds)."""
    times: dict[str, float] = {}
    t0 = phase = time.monotonic()

    def took(what: str) -> None:
        nonlocal phase
        times[what] = time.monotonic() - phase
        say(f"cluster: {what} ({times[what]:.1f} s)")
        phase = time.monotonic()

    if running_pid("kube-apiserver") is None:
        raise LabError("cluster: the lab is not up (kube-apiserver is not running); `make lab-up` first")
    check_packages()
    CLUSTER_DIR.mkdir(parents=True, exist_ok=True)
    _claim_machine()
    record_before()
    (CLUSTER_DIR / "wanted").touch()
    bins = {**binaries(), **node_binaries()}
    took("node binaries ready")
    pause_archive, pause_ref = build_image("pause")
    probe_archive, probe_ref = build_image("probe")
    took("local images built")
    network_up()
    start_gateway()
    took(f"bridge {BRIDGE} ({HOST_ADDR}), relay ready")
    start_containerd(pause_ref)
    took("containerd ready")
    for archive, ref in ((pause_archive, pause_ref), (probe_archive, probe_ref)):
        if ctr("images", "ls", "-q", f"name=={ref}").stdout.strip() != ref:
            import_image(archive, ref)
    took("images imported")
    start_controller_manager(bins)   # every controller now (cluster_wanted)
    res = kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=CLUSTER_OBJECTS,
                  capture=True, check=False)
    if res.returncode != 0:
        raise LabError(f"cluster: the kubernetes EndpointSlice and RBAC binding: {res.stderr.strip()}")
    start_scheduler(bins)
    took("controller-manager and scheduler ready")
    kubelet_started = start_kubelet(bins)
    took("kubelet started")

    def node_ready() -> str | None:
        res = kubectl("get", "node", NODE, "-o",
                      "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
                      check=False, capture=True)
        return res.stdout.strip() if res.returncode == 0 else None
    _wait(f"kubelet: node {NODE} Ready", lambda: node_ready() == "True", "kubelet")
    times["node Ready after kubelet start"] = time.monotonic() - kubelet_started
    say(f"cluster: node {NODE} Ready {times['node Ready after kubelet start']:.1f} s after the "
        "kubelet started")
    phase = time.monotonic()
    start_kube_proxy(bins)     # once the Node exists: kube-proxy waits 30 s for it otherwise
    took("kube-proxy ready")
    record_after()
    times["cluster up"] = time.monotonic() - t0
    say(f"cluster: up in {times['cluster up']:.1f} s")
    return times


def _wait(what: str, predicate, component: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise LabError(f"{what}: not after {timeout:.0f} s; see {STATE / 'logs' / (component + '.log')}")
        if running_pid(component) is None:
            raise LabError(f"{what}: {component} exited; see {STATE / 'logs' / (component + '.log')}")
        time.sleep(0.2)


def probe_image() -> str:
    """The reference of the local probe image (devlab/images/probe), for tests."""
    return build_image("probe")[1]


def down(*, lab_stays: bool = True) -> None:
    """Remove everything `up` created, by name; a no-op when there is no cluster. With
    `lab_stays` (not when `lab down` calls it), the
    controller-manager to the light lab's controllers."""
    if not CLUSTER_DIR.exists() and not Path(f"/sys/class/net/{BRIDGE}").exists():
        return
    t0 = time.monotonic()
    api_up = running_pid("kube-apiserver") is not None
    stop_process("kube-scheduler")
    ids: list[str] = []
    if running_pid("containerd"):
        ids = ctr("containers", "ls", "-q", check=False).stdout.split()
    if api_up and running_pid("kubelet"):
        # the kubelet tears its pods down properly (CNI DEL, volumes) once they are gone
        kubectl("delete", "pods", "--all-namespaces", "--field-selector", f"spec.nodeName={NODE}",
                "--force", "--grace-period=0", "--wait=false", check=False, capture=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and ctr("tasks", "ls", "-q", check=False).stdout.strip():
            time.sleep(0.3)
    stop_process("kubelet")
    stop_process("kube-proxy")      # its chains go below, with every other chain the node made
    if running_pid("containerd"):
        for task in ctr("tasks", "ls", "-q", check=False).stdout.split():
            ctr("tasks", "kill", "-s", "SIGKILL", task, check=False)
        time.sleep(0.3)
        for task in ctr("tasks", "ls", "-q", check=False).stdout.split():
            ctr("tasks", "delete", "-f", task, check=False)
        for c in ctr("containers", "ls", "-q", check=False).stdout.split():
            ctr("containers", "rm", c, check=False)
    stop_process("containerd")
    for pid in our_shims():
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    stop_process("lab-gateway")
    if api_up:
        kubectl("delete", "node", NODE, "--ignore-not-found", "--wait=false", check=False, capture=True)
        kubectl("delete", "-f", "-", "--ignore-not-found", "--wait=false", input=CLUSTER_OBJECTS,
                check=False, capture=True)
    (CLUSTER_DIR / "wanted").unlink(missing_ok=True)
    if api_up and lab_stays and running_pid("kube-controller-manager"):
        start_controller_manager(binaries())
    cleanup_host(ids)
    say(f"cluster: down ({time.monotonic() - t0:.1f} s)")
