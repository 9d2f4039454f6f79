"""The node's components, each started as a process of the lab: containerd (its own config, root,
state and socket), the kubelet (its serving certificate, its cgroup root), kube-proxy (iptables
mode) and kube-scheduler."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import yaml

from benchfarm_devlab.cluster.common import (
    CGROUP_ROOT,
    CNI_DIR,
    CTRD,
    KUBELET_ROOT,
    NODE,
    POD_LOGS,
    SOCKET,
    ctr,
    run,
    write,
)
from benchfarm_devlab.cluster.network import iptables
from benchfarm_devlab.config import CLUSTER_DIR, HOST_ADDR, POD_CIDR, PORTS, STATE, say
from benchfarm_devlab.pki import client_cert, write_kubeconfig
from benchfarm_devlab.processes import http_ok, port_open, running_pid, start_process, stop_process


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


def start_containerd(sandbox_image: str) -> None:
    CTRD.mkdir(parents=True, exist_ok=True)
    cfg = _containerd_config(sandbox_image)
    start_process("containerd", [shutil.which("containerd"), "--config", str(cfg)], ports=[],
                  ready=lambda: ctr("version", check=False).returncode == 0, timeout=30,
                  restart_on_change=True)


def _kubeconfig(name: str, cn: str, org: str | None = None) -> Path:
    path = CLUSTER_DIR / f"{name}.kubeconfig"
    write_kubeconfig(path, None, cn, cert=client_cert(name, cn, org))
    return path


def cgroup_hierarchies() -> list[Path]:
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        f = line.split()
        if f[2] == "cgroup":
            out.append(Path(f[1]))
    return out


def start_kubelet(bins: dict[str, Path]) -> float:
    """The kubelet; returns when it started (monotonic), for the Node-Ready time."""
    for d in (KUBELET_ROOT, POD_LOGS, CLUSTER_DIR / "manifests"):
        d.mkdir(parents=True, exist_ok=True)
    for h in cgroup_hierarchies():    # the kubelet's cgroup root (kubepods below it), ours by name
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
    path = write(CLUSTER_DIR / "kubelet.yaml", yaml.safe_dump(config))
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
        run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={NODE}",
            "-keyout", str(key), "-out", str(pki / "kubelet-serving.csr"), what="kubelet cert")
        run("openssl", "x509", "-req", "-in", str(pki / "kubelet-serving.csr"), "-CA",
            str(pki / "ca.crt"), "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-days", "3650",
            "-extfile", str(ext), "-extensions", "ext", "-out", str(crt), what="kubelet cert")
        os.chmod(key, 0o600)
    return crt, key


def start_kube_proxy(bins: dict[str, Path]) -> None:
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
    path = write(CLUSTER_DIR / "kube-proxy.yaml", yaml.safe_dump(config))
    start_process("kube-proxy", [str(bins["kube-proxy"]), f"--config={path}", "--v=1"],
                  ports=[PORTS.kube_proxy_healthz, PORTS.kube_proxy_metrics], timeout=60,
                  restart_on_change=True,
                  ready=lambda: port_open(PORTS.kube_proxy_healthz)
                  and iptables("-S", "KUBE-SERVICES", table="nat", check=False).returncode == 0)


def start_scheduler(bins: dict[str, Path]) -> None:
    kc = _kubeconfig("kube-scheduler", "system:kube-scheduler")
    start_process("kube-scheduler", [
        str(bins["kube-scheduler"]), f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}", "--bind-address=127.0.0.1",
        f"--secure-port={PORTS.kube_scheduler}", "--leader-elect=false", "--v=1",
    ], ports=[PORTS.kube_scheduler], timeout=60, restart_on_change=True,
        ready=lambda: http_ok(f"https://127.0.0.1:{PORTS.kube_scheduler}/healthz"))
