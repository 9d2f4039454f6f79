"""The cluster's binaries and images: the node's binaries, built from the Go module proxy on first
use; the Debian packages it needs; the local one-binary images (the pause sandbox, the tests'
probe) built with umoci; and OCI archives imported into its containerd. Nothing is ever pulled
from a registry."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from benchfarm_devlab.cluster.common import APT_HINT, IMAGE_REPO, ctr, run
from benchfarm_devlab.config import CACHE, K8S_VERSION, REPO, LabError, say


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


def check_packages() -> None:
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
        run("umoci", "init", "--layout", str(layout), what=f"image {name} (umoci)")
        run("umoci", "new", "--image", f"{layout}:{tag}", what=f"image {name} (umoci)")
        run("umoci", "insert", "--image", f"{layout}:{tag}", str(binary), f"/{name}",
            what=f"image {name} (umoci)")
        run("umoci", "config", "--image", f"{layout}:{tag}", "--config.entrypoint", f"/{name}",
            "--config.user", "65532:65532", "--os", "linux", "--architecture", "amd64",
            "--author", "benchfarm devlab", what=f"image {name} (umoci)")
        run("tar", "-C", str(layout), "-cf", str(archive) + ".tmp", ".", what=f"image {name} (tar)")
        os.replace(str(archive) + ".tmp", archive)
    return archive, ref


def import_image(oci_archive_path: str | Path, ref: str) -> str:
    """Import an OCI archive (an OCI image layout in a tar: umoci's, or `buildah push IMAGE
    oci-archive:FILE`) into the cluster's containerd as `ref`, unpacked for the CRI. Use a
    versioned tag and imagePullPolicy IfNotPresent in pods (nothing can be pulled here). Returns
    the image's manifest digest. The archive may have one image (its own tag is not used)."""
    res = ctr("images", "import", "--digests", str(oci_archive_path))
    # "unpacking import-<date>:<tag> (sha256:...)...done", then the same as import-<date>@sha256:...
    found = re.findall(r"unpacking (\S+) \((sha256:[0-9a-f]{64})\)", res.stdout)
    if not found:
        raise LabError(f"import_image: no image in {oci_archive_path}: {(res.stdout + res.stderr).strip()}")
    digests = {d for _, d in found}
    if len(digests) != 1:
        raise LabError(f"import_image: {oci_archive_path} holds {len(digests)} images; expected one")
    digest = digests.pop()
    by_digest = next(n for n, _ in found if n.endswith("@" + digest))
    ctr("images", "tag", "--force", by_digest, ref)
    for name in {n for n, _ in found} - {ref}:    # the names the archive brought, unless asked for
        ctr("images", "rm", name, check=False)
    return digest
