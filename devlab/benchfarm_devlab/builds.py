"""Software builds in the lab's store, as a lab's CI publishes them: what runs deploy.

`make lab-up` puts two arm64 kernel builds of Debian into MinIO, each beside a SHA256SUMS file:
`builds/qemu-arm64/debian-arm64/vmlinuz` (the kernel the arm64 board's image boots anyway) and
`builds/qemu-arm64/debian-cloud-arm64/vmlinuz` (Debian's cloud flavour: another build, another
`uname -r`). `testplans/examples/deploy-kernel.yaml` and `ab-kernels.yaml` name them.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path

from benchfarm_devlab.config import BUCKET, PORTS, REPO
from benchfarm_devlab.pki import minio_credentials

PREFIX = "builds/qemu-arm64"
KERNELS = {"debian-arm64": None, "debian-cloud-arm64": "linux-image-cloud-arm64"}


def kernel_build(package: str) -> Path:
    res = subprocess.run([sys.executable, str(REPO / "exporters/virtual/build_image.py"),
                          "--kernel", "arm64", package], stdout=subprocess.PIPE, text=True,
                         check=True)
    return Path(res.stdout.strip())


def publish(arm64_image: Path) -> dict[str, str]:
    """Upload the kernel builds (unless the same bytes are there); their sha256 by build."""
    from minio import Minio
    access, secret = minio_credentials()
    client = Minio(f"127.0.0.1:{PORTS.minio}", access_key=access, secret_key=secret,
                   secure=False)
    out = {}
    for build, package in KERNELS.items():
        path = arm64_image / "vmlinuz" if package is None else kernel_build(package)
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        key = f"{PREFIX}/{build}/vmlinuz"
        try:
            same = client.stat_object(BUCKET, key).metadata.get("x-amz-meta-sha256") == digest
        except Exception:
            same = False
        if not same:
            client.put_object(BUCKET, key, io.BytesIO(data), len(data),
                              metadata={"sha256": digest})
            sums = f"{digest}  vmlinuz\n".encode()
            client.put_object(BUCKET, f"{PREFIX}/{build}/SHA256SUMS", io.BytesIO(sums), len(sums),
                              content_type="text/plain")
            manifest = json.dumps({"source": package or "the arm64 board image",
                                   "sha256": digest}).encode()
            client.put_object(BUCKET, f"{PREFIX}/{build}/build.json", io.BytesIO(manifest),
                              len(manifest), content_type="application/json")
        out[build] = digest
    return out
