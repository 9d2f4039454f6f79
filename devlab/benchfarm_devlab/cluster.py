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

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchfarm_devlab.binaries import binaries
from benchfarm_devlab.config import (
    BRIDGE,
    CACHE,
    CLUSTER_DIR,
    HOST_ADDR,
    K8S_VERSION,
    POD_CIDR,
    PORT_BASE,
    PORTS,
    REPO,
    STATE,
    LabError,
    say,
)
from benchfarm_devlab.controlplane import start_controller_manager
from benchfarm_devlab.env import kubectl
from benchfarm_devlab.pki import client_cert, write_kubeconfig
from benchfarm_devlab.processes import (
    http_ok,
    pids_where,
    port_open,
    running_pid,
    start_process,
    stop_process,
)

NODE = f"benchfarm-{PORT_BASE}"
GUARD = f"BF{PORT_BASE}-GUARD"
CNI_NETWORK = f"benchfarm-{PORT_BASE}"
CGROUP_ROOT = f"benchfarm-{PORT_BASE}"
OWNER = Path("/run/benchfarm-cluster.owner")
IMAGE_REPO = "benchfarm.local"
NODE_COMPONENTS = ["kube-scheduler", "kubelet", "kube-proxy", "lab-gateway", "containerd"]

CTRD = CLUSTER_DIR / "containerd"
SOCKET = CTRD / "containerd.sock"
KUBELET_ROOT = CLUSTER_DIR / "kubelet"
POD_LOGS = CLUSTER_DIR / "pod-logs"
CNI_DIR = CLUSTER_DIR / "cni"
# Outside its own directories, the kubelet, containerd and CNI write here (paths fixed in their code).
SHARED_DIRS = [Path("/var/lib/kubelet/device-plugins"), Path("/var/log/containers"),
               Path("/run/containerd"), Path("/var/lib/cni")]

MANIFEST = CLUSTER_DIR / "manifest.json"     # what cluster-up created (see the docstring)
IPTABLES_TABLES = ("filter", "nat", "mangle", "raw")
# The kubelet sets these at start (protectKernelDefaults false); down puts them back.
KUBELET_SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic",
                   "kernel/panic_on_oops", "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")
# Shared files of fixed names the kubelet writes (removed on down only when it made them).
SHARED_FILES = [Path("/var/lib/kubelet/device-plugins/kubelet.sock"),
                Path("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint")]

APT_HINT = "`make cluster-deps` (containerd, runc, containernetworking-plugins, umoci, iptables)"


def _run(*argv: str, check: bool = True, what: str | None = None,
         **kw) -> subprocess.CompletedProcess:
    res = subprocess.run(list(argv), capture_output=True, text=True, **kw)
    if check and res.returncode != 0:
        raise LabError(f"{what or argv[0]}: `{' '.join(argv)}` failed: "
                       f"{(res.stderr or res.stdout).strip()}")
    return res


def _write(path: Path, text: str) -> Path:
    """Write a component's file only when it changes (kube-proxy exits when its config is touched)."""
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def _ctr(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run("ctr", "--address", str(SOCKET), "-n", "k8s.io", *args, check=check,
                what="containerd (ctr)")


# --- binaries, packages, images ------------------------------------------------------------------

def node_binaries() -> dict[str, Path]:
    """kubelet, kube-scheduler, kube-proxy: built once into their own cache dir (first use only)."""
    out = CACHE / "bin" / f"kubernetes-node-{K8S_VERSION}"
    paths = {n: out / n for n in ("kubelet", "kube-scheduler", "kube-proxy")}
    if not all(p.exists() for p in paths.values()):
        say("building kubelet, kube-scheduler, kube-proxy from the Go module proxy (first time only)")
        env = {**os.environ, "K8S_VERSION": K8S_VERSION, "BENCHFARM_CACHE": str(CACHE)}
        if subprocess.run(["bash", str(REPO / "hack" / "build-binaries.sh"), "kubernetes_node"],
                          env=env).returncode != 0:
            raise LabError("building the node binaries failed; see the [build] lines above")
    return paths


def _check_packages() -> None:
    missing = [p for p in ("containerd", "containerd-shim-runc-v2", "ctr", "runc", "umoci",
                           "iptables") if shutil.which(p) is None]
    missing += [f"/usr/lib/cni/{p}" for p in ("bridge", "host-local", "loopback")
                if not Path(f"/usr/lib/cni/{p}").exists()]
    if missing:
        raise LabError(f"cluster: {', '.join(missing)} not installed; {APT_HINT}")
    if os.geteuid() != 0:
        raise LabError("cluster: a kubelet, containerd and a bridge need root; run as root")


def _static_binary(name: str) -> Path:
    """A static Go program of devlab/images/<name>/main.go, built once, cached by its source."""
    src = REPO / "devlab" / "images" / name / "main.go"
    digest = hashlib.sha256(src.read_bytes()).hexdigest()[:12]
    out = CACHE / "images" / f"{name}-{digest}" / name
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-trimpath"}
        res = subprocess.run(["go", "build", "-ldflags=-s -w", "-o", str(out) + ".tmp", str(src)],
                             env=env, capture_output=True, text=True)
        if res.returncode != 0:
            raise LabError(f"image {name}: go build failed: {res.stderr.strip()}")
        os.replace(str(out) + ".tmp", out)
    return out


def build_image(name: str) -> tuple[Path, str]:
    """An OCI archive of a one-binary image (devlab/images/<name>, run as 65532), made with umoci
    without a daemon or a registry; cached by content. Returns (archive, reference); the tag is the
    binary's digest, so a new build is a new version and IfNotPresent never keeps an old one."""
    binary = _static_binary(name)
    tag = hashlib.sha256(binary.read_bytes()).hexdigest()[:12]
    ref = f"{IMAGE_REPO}/{name}:{tag}"
    archive = CACHE / "images" / f"{name}-{tag}.oci.tar"
    if archive.exists():
        return archive, ref
    with tempfile.TemporaryDirectory(dir=CACHE / "images") as tmp:
        layout = Path(tmp) / "layout"
        _run("umoci", "init", "--layout", str(layout), what=f"image {name} (umoci)")
        _run("umoci", "new", "--image", f"{layout}:{tag}", what=f"image {name} (umoci)")
        _run("umoci", "insert", "--image", f"{layout}:{tag}", str(binary), f"/{name}",
             what=f"image {name} (umoci)")
        _run("umoci", "config", "--image", f"{layout}:{tag}", "--config.entrypoint", f"/{name}",
             "--config.user", "65532:65532", "--os", "linux", "--architecture", "amd64",
             "--author", "benchfarm devlab", what=f"image {name} (umoci)")
        _run("tar", "-C", str(layout), "-cf", str(archive) + ".tmp", ".", what=f"image {name} (tar)")
        os.replace(str(archive) + ".tmp", archive)
    return archive, ref


def import_image(oci_archive_path: str | Path, ref: str) -> str:
    """Import an OCI archive (an OCI image layout in a tar: umoci's, or `buildah push IMAGE
    oci-archive:FILE`) into the cluster's containerd as `ref`, unpacked for the CRI. Use a
    versioned tag and imagePullPolicy IfNotPresent in pods (nothing can be pulled here). Returns
    the image's manifest digest. The archive may have one image (its own tag is not used)."""
    res = _ctr("images", "import", "--digests", str(oci_archive_path))
    # "unpacking import-<date>:<tag> (sha256:...)...done", then the same as import-<date>@sha256:...
    found = re.findall(r"unpacking (\S+) \((sha256:[0-9a-f]{64})\)", res.stdout)
    if not found:
        raise LabError(f"import_image: no image in {oci_archive_path}: {(res.stdout + res.stderr).strip()}")
    digests = {d for _, d in found}
    if len(digests) != 1:
        raise LabError(f"import_image: {oci_archive_path} holds {len(digests)} images; expected one")
    digest = digests.pop()
    by_digest = next(n for n, _ in found if n.endswith("@" + digest))
    _ctr("images", "tag", "--force", by_digest, ref)
    for name in {n for n, _ in found} - {ref}:    # the names the archive brought, unless asked for
        _ctr("images", "rm", name, check=False)
    return digest


# --- the network ---------------------------------------------------------------------------------

def _iptables(*args: str, check: bool = True, table: str = "filter") -> subprocess.CompletedProcess:
    return _run("iptables", "-w", "5", "-t", table, *args, check=check, what="iptables")


def _network_up() -> None:
    """The bridge with the pods' host address, and the guard that keeps that address local."""
    if not Path(f"/sys/class/net/{BRIDGE}").exists():
        _run("ip", "link", "add", BRIDGE, "type", "bridge", what=f"bridge {BRIDGE}")
    _run("ip", "addr", "replace", f"{HOST_ADDR}/{POD_CIDR.split('/')[1]}", "dev", BRIDGE,
         what=f"bridge {BRIDGE}")
    _run("ip", "link", "set", BRIDGE, "up", what=f"bridge {BRIDGE}")
    if _iptables("-S", GUARD, check=False).returncode != 0:
        _iptables("-N", GUARD)
    _iptables("-F", GUARD)
    _iptables("-A", GUARD, "-d", HOST_ADDR, "-i", BRIDGE, "-j", "RETURN")
    _iptables("-A", GUARD, "-d", HOST_ADDR, "-i", "lo", "-j", "RETURN")
    _iptables("-A", GUARD, "-d", HOST_ADDR, "-j", "DROP")
    if _iptables("-C", "INPUT", "-j", GUARD, check=False).returncode != 0:
        _iptables("-I", "INPUT", "-j", GUARD)
    (CNI_DIR / "net.d").mkdir(parents=True, exist_ok=True)
    conflist = {"cniVersion": "0.4.0", "name": CNI_NETWORK, "plugins": [{
        "type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False, "hairpinMode": True,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR, "gateway": HOST_ADDR}]],
                 "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(CNI_DIR / "ipam")}}]}
    _write(CNI_DIR / "net.d" / "10-benchfarm.conflist", json.dumps(conflist, indent=2))


def pod_addresses() -> dict[str, str]:
    """Where a pod reaches the lab (host:port), as a local process reaches it on 127.0.0.1."""
    return {"apiserver": f"{HOST_ADDR}:{PORTS.apiserver}",
            "coordinator": f"{HOST_ADDR}:{PORTS.coordinator}",
            "minio": f"{HOST_ADDR}:{PORTS.minio}",
            "sshd": f"{HOST_ADDR}:{PORTS.sshd}"}


def _relayed_ports() -> list[int]:
    # the exporter hosts' SSH: the way to every console and power switch (labnet.py), and
    # where sessions stage software (sshd.py)
    return [PORTS.apiserver, PORTS.coordinator, PORTS.minio, PORTS.sshd]


def _start_gateway() -> None:
    ports = _relayed_ports()

    def ready() -> bool:
        import socket
        for p in ports[:3]:
            with socket.socket() as s:
                s.settimeout(0.5)
                if s.connect_ex((HOST_ADDR, p)) != 0:
                    return False
        return True
    start_process("lab-gateway", [sys.executable, "-m", "benchfarm_devlab.relay",
                                  HOST_ADDR, *map(str, ports)],
                  ports=[], ready=ready, timeout=20, restart_on_change=True)


# --- containerd ----------------------------------------------------------------------------------

def _containerd_config(sandbox_image: str) -> Path:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    text = f"""version = 2
root = "{CTRD / 'root'}"
state = "{CTRD / 'state'}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{SOCKET}"
[ttrpc]
  address = "{SOCKET}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{CTRD / 'opt'}"
[plugins."io.containerd.runtime.v1.linux"]
  runtime_root = "{CTRD / 'runc-v1'}"
[{cri}]
  sandbox_image = "{sandbox_image}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "{PORTS.containerd_stream}"
  disable_apparmor = true
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{shutil.which('runc')}"
        Root = "{CTRD / 'runc'}"
  [{cri}.cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{CNI_DIR / 'net.d'}"
    max_conf_num = 1
"""
    path = CTRD / "config.toml"
    if path.exists() and path.read_text() != text and running_pid("containerd"):
        say("containerd: its configuration changed; restarting it")
        stop_process("containerd")
    path.write_text(text)
    return path


def _start_containerd(sandbox_image: str) -> None:
    CTRD.mkdir(parents=True, exist_ok=True)
    cfg = _containerd_config(sandbox_image)
    start_process("containerd", [shutil.which("containerd"), "--config", str(cfg)], ports=[],
                  ready=lambda: _ctr("version", check=False).returncode == 0, timeout=30,
                  restart_on_change=True)


# --- the node's components -----------------------------------------------------------------------

def _kubeconfig(name: str, cn: str, org: str | None = None) -> Path:
    path = CLUSTER_DIR / f"{name}.kubeconfig"
    write_kubeconfig(path, None, cn, cert=client_cert(name, cn, org))
    return path


def _cgroup_hierarchies() -> list[Path]:
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        f = line.split()
        if f[2] == "cgroup":
            out.append(Path(f[1]))
    return out


def _start_kubelet(bins: dict[str, Path]) -> float:
    """The kubelet; returns when it started (monotonic), for the Node-Ready time."""
    for d in (KUBELET_ROOT, POD_LOGS, CLUSTER_DIR / "manifests"):
        d.mkdir(parents=True, exist_ok=True)
    for h in _cgroup_hierarchies():    # the kubelet's cgroup root (kubepods below it), ours by name
        (h / CGROUP_ROOT).mkdir(exist_ok=True)
    pki = STATE / "pki"
    serving = _kubelet_serving_cert()
    # what mattered on this kind of host (Debian 12, cgroup v1, swap possible, no systemd, small
    # disk): cgroupfs, failCgroupV1 false, failSwapOn false, no node-allocatable enforcement, low
    # eviction thresholds and no image GC (local images cannot be pulled back)
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": HOST_ADDR, "port": PORTS.kubelet, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": PORTS.kubelet_healthz,
        "authentication": {"x509": {"clientCAFile": str(pki / "ca.crt")},
                           "webhook": {"enabled": True}, "anonymous": {"enabled": False}},
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{SOCKET}", "imageServiceEndpoint": f"unix://{SOCKET}",
        "cgroupDriver": "cgroupfs", "cgroupRoot": f"/{CGROUP_ROOT}", "cgroupsPerQOS": True,
        "failCgroupV1": False, "failSwapOn": False, "enforceNodeAllocatable": [],
        "evictionHard": {"memory.available": "1%", "nodefs.available": "1%",
                         "nodefs.inodesFree": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "podLogsDir": str(POD_LOGS), "staticPodPath": str(CLUSTER_DIR / "manifests"),
        "volumePluginDir": str(KUBELET_ROOT / "volume-plugins"),
        "resolvConf": "/etc/resolv.conf", "maxPods": 30, "serializeImagePulls": False,
        "registerNode": True, "rotateCertificates": False, "serverTLSBootstrap": False,
        "tlsCertFile": str(serving[0]), "tlsPrivateKeyFile": str(serving[1]),
        "containerLogMaxSize": "10Mi", "containerLogMaxFiles": 2,
    }
    path = _write(CLUSTER_DIR / "kubelet.yaml", yaml.safe_dump(config))
    kubeconfig = _kubeconfig("kubelet", f"system:node:{NODE}", "system:nodes")
    started = time.monotonic()
    start_process("kubelet", [
        str(bins["kubelet"]), f"--config={path}", f"--kubeconfig={kubeconfig}",
        f"--root-dir={KUBELET_ROOT}", f"--hostname-override={NODE}", f"--node-ip={HOST_ADDR}",
        f"--cert-dir={KUBELET_ROOT / 'pki'}", "--v=1",
    ], ports=[], timeout=60, restart_on_change=True,
        ready=lambda: http_ok(f"http://127.0.0.1:{PORTS.kubelet_healthz}/healthz"))
    return started


def _kubelet_serving_cert() -> tuple[Path, Path]:
    """The kubelet's serving certificate (the API server does not check it; a fixed one keeps the
    kubelet from writing a self-signed pair of its own)."""
    pki = STATE / "pki"
    crt, key = pki / "kubelet-serving.crt", pki / "kubelet-serving.key"
    if not crt.exists():
        ext = pki / "kubelet-serving.cnf"
        ext.write_text(f"[ext]\nsubjectAltName=IP:{HOST_ADDR},DNS:{NODE}\nbasicConstraints=CA:FALSE\n"
                       "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
        _run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={NODE}",
             "-keyout", str(key), "-out", str(pki / "kubelet-serving.csr"), what="kubelet cert")
        _run("openssl", "x509", "-req", "-in", str(pki / "kubelet-serving.csr"), "-CA",
             str(pki / "ca.crt"), "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-days", "3650",
             "-extfile", str(ext), "-extensions", "ext", "-out", str(crt), what="kubelet cert")
        os.chmod(key, 0o600)
    return crt, key


def _start_kube_proxy(bins: dict[str, Path]) -> None:
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(_kubeconfig("kube-proxy", "system:kube-proxy"))},
        "mode": "iptables", "hostnameOverride": NODE, "clusterCIDR": POD_CIDR,
        "bindAddress": HOST_ADDR,
        "healthzBindAddress": f"127.0.0.1:{PORTS.kube_proxy_healthz}",
        "metricsBindAddress": f"127.0.0.1:{PORTS.kube_proxy_metrics}",
        # NodePorts only on the pods' host address (never on the machine's network), no
        # route_localnet, no conntrack sysctls changed
        "nodePortAddresses": [f"{HOST_ADDR}/32"],
        "iptables": {"localhostNodePorts": False, "masqueradeAll": False},
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                      "tcpCloseWaitTimeout": "0s"},
    }
    path = _write(CLUSTER_DIR / "kube-proxy.yaml", yaml.safe_dump(config))
    start_process("kube-proxy", [str(bins["kube-proxy"]), f"--config={path}", "--v=1"],
                  ports=[PORTS.kube_proxy_healthz, PORTS.kube_proxy_metrics], timeout=60,
                  restart_on_change=True,
                  ready=lambda: port_open(PORTS.kube_proxy_healthz)
                  and _iptables("-S", "KUBE-SERVICES", table="nat", check=False).returncode == 0)


def _start_scheduler(bins: dict[str, Path]) -> None:
    kc = _kubeconfig("kube-scheduler", "system:kube-scheduler")
    start_process("kube-scheduler", [
        str(bins["kube-scheduler"]), f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}", "--bind-address=127.0.0.1",
        f"--secure-port={PORTS.kube_scheduler}", "--leader-elect=false", "--v=1",
    ], ports=[PORTS.kube_scheduler], timeout=60, restart_on_change=True,
        ready=lambda: http_ok(f"https://127.0.0.1:{PORTS.kube_scheduler}/healthz"))


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


# --- up and down ---------------------------------------------------------------------------------

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


# --- the manifest: what cluster-up created, so that down removes exactly that -------------------

def _load_manifest() -> dict:
    try:
        return json.loads(MANIFEST.read_text())
    except (OSError, ValueError):
        return {}


def _save_manifest(manifest: dict) -> None:
    tmp = MANIFEST.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, MANIFEST)


def iptables_state() -> dict[str, dict[str, list[str]]]:
    """Every chain (`-N`) and rule (`-A`) of iptables and ip6tables, per table, as `-S` prints them."""
    out: dict[str, dict[str, list[str]]] = {}
    for cmd in ("iptables", "ip6tables"):
        if shutil.which(cmd) is None:
            continue
        out[cmd] = {}
        for table in IPTABLES_TABLES:
            res = _run(cmd, "-w", "5", "-t", table, "-S", check=False)
            if res.returncode == 0:
                out[cmd][table] = [line for line in res.stdout.splitlines()
                                   if line.startswith(("-N ", "-A "))]
    return out


def _ours(name: str) -> bool:
    """A chain name of the kubelet's, kube-proxy's or the guard's."""
    return name.startswith("KUBE-") or name == GUARD


def _target(rule: str) -> str | None:
    m = re.search(r" -[jg] (\S+)", rule)
    return m.group(1) if m else None


def iptables_created(before: dict[str, dict[str, list[str]]],
                     now: dict[str, dict[str, list[str]]] | None = None) -> dict[str, dict[str, dict]]:
    """What appeared since `before`, of this cluster's: `KUBE-*` chains and the guard, and the
    rules in such chains or jumping to one (in any chain, built-in ones too). A rule that was
    there is not counted again (as many as there were)."""
    now = iptables_state() if now is None else now
    out: dict[str, dict[str, dict]] = {}
    for cmd, tables in now.items():
        for table, lines in tables.items():
            old = before.get(cmd, {}).get(table, [])
            chains = [ln[3:] for ln in lines if ln.startswith("-N ")
                      and _ours(ln[3:]) and ln not in old]
            left = list(old)
            rules = []
            for ln in lines:
                if not ln.startswith("-A "):
                    continue
                if ln in left:
                    left.remove(ln)
                    continue
                chain, target = ln.split()[1], _target(ln)
                if _ours(chain) or (target is not None and _ours(target)):
                    rules.append(ln)
            if chains or rules:
                out.setdefault(cmd, {})[table] = {"chains": chains, "rules": rules}
    return out


def _remove_iptables(created: dict[str, dict[str, dict]]) -> None:
    """Rules first (so no chain is referenced), then the chains: flushed, then deleted."""
    for cmd, tables in created.items():
        for table, what in tables.items():
            new_chains = set(what["chains"])
            for rule in what["rules"]:
                if rule.split()[1] not in new_chains:      # a new chain's rules go with it
                    _run(cmd, "-w", "5", "-t", table, "-D", *shlex.split(rule)[1:], check=False)
            for chain in new_chains:
                _run(cmd, "-w", "5", "-t", table, "-F", chain, check=False)
            for chain in new_chains:
                _run(cmd, "-w", "5", "-t", table, "-X", chain, check=False)


def _sysctl(name: str) -> str | None:
    try:
        return (Path("/proc/sys") / name).read_text().strip()
    except OSError:
        return None


def _record_before() -> None:
    """What is on the machine before cluster-up starts anything (once per cluster: a second up of
    a running one keeps the first record), and which shared directories it is about to create."""
    manifest = _load_manifest()
    if "iptables_before" not in manifest:
        manifest.update({
            "iptables_before": iptables_state(),
            "sysctls_before": {k: v for k in KUBELET_SYSCTLS if (v := _sysctl(k)) is not None},
            "files_before": [str(f) for f in SHARED_FILES if f.exists() or f.is_symlink()],
            "bridge": {"name": BRIDGE, "created": not Path(f"/sys/class/net/{BRIDGE}").exists()},
            "owner_file": str(OWNER),
        })
    created = manifest.setdefault("dirs_created", [])
    for d in SHARED_DIRS:          # on down they are removed again if empty
        top = None
        while not d.exists():
            top, d = d, d.parent
        if top is not None and str(top) not in created:
            created.append(str(top))
    _save_manifest(manifest)


def _record_after() -> None:
    """What the node added: iptables chains and rules, processes (for `lab status` and tests)."""
    manifest = _load_manifest()
    manifest["iptables_created"] = iptables_created(manifest.get("iptables_before", {}))
    manifest["processes"] = {n: running_pid(n) for n in NODE_COMPONENTS if running_pid(n)}
    manifest["own_dirs"] = [str(CLUSTER_DIR)]
    manifest["cgroups"] = [str(h / CGROUP_ROOT) for h in _cgroup_hierarchies()]
    _save_manifest(manifest)


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
    _check_packages()
    CLUSTER_DIR.mkdir(parents=True, exist_ok=True)
    _claim_machine()
    _record_before()
    (CLUSTER_DIR / "wanted").touch()
    bins = {**binaries(), **node_binaries()}
    took("node binaries ready")
    pause_archive, pause_ref = build_image("pause")
    probe_archive, probe_ref = build_image("probe")
    took("local images built")
    _network_up()
    _start_gateway()
    took(f"bridge {BRIDGE} ({HOST_ADDR}), relay ready")
    _start_containerd(pause_ref)
    took("containerd ready")
    for archive, ref in ((pause_archive, pause_ref), (probe_archive, probe_ref)):
        if _ctr("images", "ls", "-q", f"name=={ref}").stdout.strip() != ref:
            import_image(archive, ref)
    took("images imported")
    start_controller_manager(bins)   # every controller now (cluster_wanted)
    res = kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=CLUSTER_OBJECTS,
                  capture=True, check=False)
    if res.returncode != 0:
        raise LabError(f"cluster: the kubernetes EndpointSlice and RBAC binding: {res.stderr.strip()}")
    _start_scheduler(bins)
    took("controller-manager and scheduler ready")
    kubelet_started = _start_kubelet(bins)
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
    _start_kube_proxy(bins)     # once the Node exists: kube-proxy waits 30 s for it otherwise
    took("kube-proxy ready")
    _record_after()
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


def _mounts_under(root: Path) -> list[str]:
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mnt = line.split()[4].replace("\\040", " ")
        if mnt == str(root) or mnt.startswith(str(root) + "/"):
            out.append(mnt)
    return sorted(out, key=lambda m: m.count("/"), reverse=True)


def _unmount_all(root: Path) -> None:
    for _ in range(3):
        mounts = _mounts_under(root)
        if not mounts:
            return
        for m in mounts:
            if subprocess.run(["umount", m], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", m], capture_output=True)


def _our_shims() -> list[int]:
    """containerd shims serving our containerd (they run in their own process groups)."""
    socket = str(SOCKET).encode()
    return pids_where(lambda cmd: cmd[0].endswith(b"containerd-shim-runc-v2") and socket in cmd)


def _shim_sockets(ids: list[str]) -> list[Path]:
    """The shims' sockets in /run/containerd/s (containerd 1.6 puts them there whatever its state
    dir): sha256 of <containerd address>/<namespace>/<id>."""
    out = []
    for i in ids:
        for addr in (str(SOCKET), f"{SOCKET}.ttrpc"):
            out.append(Path("/run/containerd/s") /
                       hashlib.sha256(f"{addr}/k8s.io/{i}".encode()).hexdigest())
    return out


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
        ids = _ctr("containers", "ls", "-q", check=False).stdout.split()
    if api_up and running_pid("kubelet"):
        # the kubelet tears its pods down properly (CNI DEL, volumes) once they are gone
        kubectl("delete", "pods", "--all-namespaces", "--field-selector", f"spec.nodeName={NODE}",
                "--force", "--grace-period=0", "--wait=false", check=False, capture=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and _ctr("tasks", "ls", "-q", check=False).stdout.strip():
            time.sleep(0.3)
    stop_process("kubelet")
    stop_process("kube-proxy")      # its chains go below, with every other chain the node made
    if running_pid("containerd"):
        for task in _ctr("tasks", "ls", "-q", check=False).stdout.split():
            _ctr("tasks", "kill", "-s", "SIGKILL", task, check=False)
        time.sleep(0.3)
        for task in _ctr("tasks", "ls", "-q", check=False).stdout.split():
            _ctr("tasks", "delete", "-f", task, check=False)
        for c in _ctr("containers", "ls", "-q", check=False).stdout.split():
            _ctr("containers", "rm", c, check=False)
    stop_process("containerd")
    for pid in _our_shims():
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
    _cleanup_host(ids)
    say(f"cluster: down ({time.monotonic() - t0:.1f} s)")


def _cleanup_host(container_ids: list[str]) -> None:
    manifest = _load_manifest()
    _unmount_all(CLUSTER_DIR)
    if manifest.get("bridge", {}).get("created", True) and Path(f"/sys/class/net/{BRIDGE}").exists():
        _run("ip", "link", "del", BRIDGE, check=False)
    if "iptables_before" in manifest:
        _remove_iptables(iptables_created(manifest["iptables_before"]))
    else:
        say(f"cluster: no {MANIFEST.name} (a cluster of an older benchfarm?): iptables left as "
            "they are; remove its KUBE-* chains by hand")
    for name, value in manifest.get("sysctls_before", {}).items():
        if _sysctl(name) != value:
            try:
                (Path("/proc/sys") / name).write_text(value)
            except OSError as exc:
                say(f"cluster: {name} not put back to {value}: {exc}")
    for h in _cgroup_hierarchies():     # deepest first; only empty cgroups can be removed
        root = h / CGROUP_ROOT
        if root.exists():
            for d in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                try:
                    d.rmdir()
                except OSError:
                    pass
            try:
                root.rmdir()
            except OSError as exc:
                say(f"cluster: cgroup {root} not removed: {exc}")
    for sock in _shim_sockets(container_ids):
        sock.unlink(missing_ok=True)
    for f in Path("/var/lib/cni/results").glob(f"{CNI_NETWORK}-*") if Path("/var/lib/cni/results").exists() else []:
        f.unlink(missing_ok=True)
    logs = Path("/var/log/containers")
    if logs.exists():
        for link in logs.iterdir():
            if link.is_symlink() and os.readlink(link).startswith(str(POD_LOGS)):
                link.unlink()
    for f in SHARED_FILES:
        if str(f) not in manifest.get("files_before", [str(f)]):
            f.unlink(missing_ok=True)
    for d in manifest.get("dirs_created", []):
        d = Path(d)          # remove what we created, deepest first, only if empty
        for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) \
                if d.exists() else []:
            try:
                sub.rmdir()
            except OSError:
                pass
        try:
            d.rmdir()
        except OSError:
            pass
    try:
        if OWNER.read_text().strip() == str(STATE):
            OWNER.unlink()
    except OSError:
        pass
    if not _mounts_under(CLUSTER_DIR):
        shutil.rmtree(CLUSTER_DIR, ignore_errors=True)
    else:
        say(f"cluster: still mounted under {CLUSTER_DIR}: {', '.join(_mounts_under(CLUSTER_DIR))}")
