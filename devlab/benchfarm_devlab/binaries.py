"""The Go-built binaries the embedded lab runs (etcd, kube-apiserver, controller-manager,
kubectl, MinIO).

Built from the Go module proxy by hack/build-binaries.sh the first time, cached by version under
BENCHFARM_CACHE; later labs only look them up. helm is not among them: only the chart's tests
and the one-node cluster use it (`make helm-binary`, a prerequisite of `make test` and
`make cluster-up`), so a first `make demo` does not wait for it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from benchfarm_devlab.config import (
    CACHE,
    ETCD_VERSION,
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
    }
    missing = [n for n, p in paths.items() if not p.exists()]
    if missing:
        say(f"building {', '.join(missing)} from the Go module proxy (first time only)")
        env = {**os.environ, "K8S_VERSION": K8S_VERSION, "ETCD_VERSION": ETCD_VERSION,
               "MINIO_VERSION": MINIO_VERSION,
               "BENCHFARM_CACHE": str(CACHE)}
        wanted = sorted({"kubernetes" if n.startswith("kube") else n for n in missing})
        if subprocess.run(["bash", str(REPO / "hack" / "build-binaries.sh"), *wanted],
                          env=env).returncode != 0:
            raise LabError("building the lab binaries failed; see the [build] lines above")
    return paths
