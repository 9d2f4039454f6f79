"""The Go-built lab binaries (etcd, kube-apiserver, controller-manager, kubectl, MinIO, helm).

Built from the Go module proxy by hack/build-binaries.sh the first time, cached by version under
BENCHFARM_CACHE; later labs only look them up.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from .config import (
    CACHE,
    ETCD_VERSION,
    HELM_VERSION,
    K8S_VERSION,
    MINIO_VERSION,
    REPO,
    LabError,
    say,
)


def binaries() -> dict[str, Path]:
    paths = {
        "etcd": CACHE / "bin" / f"etcd-{ETCD_VERSION}" / "etcd",
        "kube-apiserver": CACHE / "bin" / f"kubernetes-{K8S_VERSION}" / "kube-apiserver",
        "kube-controller-manager": CACHE / "bin" / f"kubernetes-{K8S_VERSION}" / "kube-controller-manager",
        "kubectl": CACHE / "bin" / f"kubernetes-{K8S_VERSION}" / "kubectl",
        "minio": CACHE / "bin" / f"minio-{MINIO_VERSION}" / "minio",
        "helm": CACHE / "bin" / f"helm-{HELM_VERSION}" / "helm",
    }
    missing = [n for n, p in paths.items() if not p.exists()]
    if missing:
        say(f"building {', '.join(missing)} from the Go module proxy (first time only)")
        env = {**os.environ, "K8S_VERSION": K8S_VERSION, "ETCD_VERSION": ETCD_VERSION,
               "MINIO_VERSION": MINIO_VERSION, "HELM_VERSION": HELM_VERSION,
               "BENCHFARM_CACHE": str(CACHE)}
        wanted = sorted({"kubernetes" if n.startswith("kube") else n for n in missing})
        if subprocess.run(["bash", str(REPO / "hack" / "build-binaries.sh"), *wanted],
                          env=env).returncode != 0:
            raise LabError("building the lab binaries failed; see the [build] lines above")
    return paths
