"""The one-node cluster's names, paths and commands, which all its parts share: the names of its
node, chains, CNI network and cgroup root, its directories under `.benchfarm/cluster/`, the
shared paths the kubelet and containerd write outside them, what the manifest records, and how a
command is run (`run`, and `ctr` for its containerd)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from benchfarm_devlab.config import CLUSTER_DIR, PORT_BASE, LabError

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


def run(*argv: str, check: bool = True, what: str | None = None,
        **kw) -> subprocess.CompletedProcess:
    res = subprocess.run(list(argv), capture_output=True, text=True, **kw)
    if check and res.returncode != 0:
        raise LabError(f"{what or argv[0]}: `{' '.join(argv)}` failed: "
                       f"{(res.stderr or res.stdout).strip()}")
    return res


def write(path: Path, text: str) -> Path:
    """Write a component's file only when it changes (kube-proxy exits when its config is touched)."""
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def ctr(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run("ctr", "--address", str(SOCKET), "-n", "k8s.io", *args, check=check,
               what="containerd (ctr)")
