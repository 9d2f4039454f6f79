"""How programs reach the lab: `.benchfarm/env` (kubeconfig, coordinator, store, operator
settings, the dashboard's address, PATH) written once the lab is up, read back by tests and the
demo, and kubectl with it.
"""

from __future__ import annotations

import os
import secrets
import shlex
import subprocess
from pathlib import Path

from benchfarm_devlab.config import (
    BUCKET,
    CACHE,
    DEVICE_TYPES,
    HELM_VERSION,
    HOST_ADDR,
    K8S_VERSION,
    NOTIFY_RECEIVERS,
    POD_CIDR,
    PORTS,
    SERVICE_CIDR,
    SMTP_CA_FILE,
    STATE,
    VENV_BIN,
)
from benchfarm_devlab.pki import labgrid_dir, labgrid_files, minio_credentials, write_kubeconfig
from benchfarm_devlab.postgres import url as database_url


def signing_key() -> str:
    """The key the operator signs its sessions' suites with (benchfarm.core.policy.trust): made once per
    state directory, readable by its owner only."""
    path = STATE / "signing-key"
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(36))
    return path.read_text().strip()


def write_env() -> Path:
    access, secret = minio_credentials()
    kubeconfig = STATE / "kubeconfig"
    write_kubeconfig(kubeconfig, (STATE / "pki" / "admin.token").read_text(), "benchfarm-admin")
    kubectl_dir = CACHE / "bin" / f"kubernetes-{K8S_VERSION}"
    env = {
        "KUBECONFIG": str(kubeconfig),
        "LG_COORDINATOR": f"127.0.0.1:{PORTS.coordinator}",
        "BENCHFARM_S3_ENDPOINT": f"127.0.0.1:{PORTS.minio}",
        "BENCHFARM_S3_ACCESS_KEY": access,
        "BENCHFARM_S3_SECRET_KEY": secret,
        "BENCHFARM_S3_BUCKET": BUCKET,
        "BENCHFARM_S3_SECURE": "false",
        "BENCHFARM_DATABASE_URL": database_url(),     # the results index (postgres.py)
        "BENCHFARM_STATE": str(STATE),
        "BENCHFARM_IPERF3_PEER": f"10.0.2.2:{PORTS.iperf3}",
        "BENCHFARM_DEVICE_TYPES": str(DEVICE_TYPES),
        "BENCHFARM_LIVENESS": f"http://127.0.0.1:{PORTS.operator_liveness}/healthz",
        "BENCHFARM_WEB_URL": f"http://127.0.0.1:{PORTS.web}",
        "BENCHFARM_METRICS_PORT": str(PORTS.operator_metrics),
        "BENCHFARM_METRICS_ADDR": "127.0.0.1",
        "BENCHFARM_SESSION_PIDS": str(STATE / "pids"),
        "BENCHFARM_SSH_CONFIG": str(STATE / "ssh" / "config"),   # exporters' SSH (sshd.py)
        "BENCHFARM_SIGNING_KEY": signing_key(),
        # the coordinator takes only certificates of the lab's labgrid CA: the lab admin's here
        # (any labgrid name, as the admin kubeconfig above is any user); the operator starts
        # with its own (`operator_env`)
        **labgrid_files("lab-admin"),
        # no software from the one-node cluster's pods and Services or the host's bridge address
        # (the lab's own services are on 127.0.0.1, refused anyway)
        "BENCHFARM_INTERNAL_CIDRS": f"{POD_CIDR},{SERVICE_CIDR},{HOST_ADDR}/32",
    }
    lines = [f"export {k}='{v}'" for k, v in env.items()]
    helm_dir = CACHE / "bin" / f"helm-{HELM_VERSION}"
    admin_bin = admin_labgrid_client()
    lines.append(f"export PATH='{admin_bin}:{VENV_BIN}:{kubectl_dir}:{helm_dir}':\"$PATH\"")
    path = STATE / "env"
    path.write_text("\n".join(lines) + "\n")
    os.chmod(path, 0o600)
    return path


def admin_labgrid_client() -> Path:
    """`.benchfarm/bin/labgrid-client`, first on the env's PATH: the stock labgrid-client
    behind a forwarder with the lab admin's certificate (BENCHFARM_LABGRID_*), for the one
    command (`benchfarm.lab.labgrid_forward`); the coordinator takes only certificates, and
    labgrid 26's client speaks no TLS. Returns its directory."""
    d = STATE / "bin"
    d.mkdir(parents=True, exist_ok=True)
    script = d / "labgrid-client"
    script.write_text(f"#!/bin/sh\n# the lab admin's labgrid-client (.benchfarm/env): TLS with the "
                      f"certificate of BENCHFARM_LABGRID_*\nexec '{VENV_BIN / 'python'}' -m "
                      f"benchfarm.lab.labgrid_forward '{VENV_BIN / 'labgrid-client'}' \"$@\"\n")
    script.chmod(0o755)
    return d


def operator_env() -> dict[str, str]:
    """What the operator runs with beyond `.benchfarm/env`: its own labgrid certificate, the
    lab's labgrid CA to issue each session's and each lease's own (`operator.launch.launchers`), and where
    notifications go on this host: the loopback ports of the stack tests' webhook receivers (no
    other loopback port: the lab's services listen on 127.0.0.1) and their SMTP server, whose
    certificate the test issues (STARTTLS, verified against SMTP_CA_FILE)."""
    d = labgrid_dir()
    first = PORTS.notify_receivers
    return {**labgrid_files("operator"),
            "BENCHFARM_LABGRID_ISSUER_CERT": str(d / "ca.crt"),
            "BENCHFARM_LABGRID_ISSUER_KEY": str(d / "ca.key"),
            "BENCHFARM_WEBHOOK_LOOPBACK_PORTS": f"{first}-{first + NOTIFY_RECEIVERS - 1}",
            "BENCHFARM_SMTP_HOST": "127.0.0.1",
            "BENCHFARM_SMTP_PORT": str(PORTS.smtp),
            "BENCHFARM_SMTP_FROM": "benchfarm@lab.example",
            "BENCHFARM_SMTP_CA_FILE": str(SMTP_CA_FILE),
            # a receiver the tests stop comes back within seconds: tried again soon enough
            "BENCHFARM_NOTIFY_BACKOFF_MAX_SECONDS": "10"}


def lab_env() -> dict[str, str]:
    """The variables of `.benchfarm/env` as a dict (for tests and the CLI), as `source` gives
    them: PATH is the lab's directories, then this process's PATH (the operator and its board
    sessions run host programs such as sigrok-cli)."""
    out = {}
    for line in (STATE / "env").read_text().splitlines():
        if line.startswith("export ") and "=" in line:
            k, v = line[7:].split("=", 1)
            value = "".join(shlex.split(v))
            out[k] = value.replace("$PATH", os.environ.get("PATH", "")) if k == "PATH" else value
    return out


def kubectl(*args: str, check: bool = True, capture: bool = False,
            input: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **lab_env()}
    exe = CACHE / "bin" / f"kubernetes-{K8S_VERSION}" / "kubectl"
    return subprocess.run([str(exe), *args], env=env, check=check, text=True,
                          capture_output=capture, input=input)
