"""The lab's credentials: a CA and the API server's certificate, tokens, kubeconfigs, MinIO keys.

Made once under `.benchfarm/pki` (mode 0700) and reused by every later `lab up`.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
from pathlib import Path

import yaml

from .config import PORTS, STATE


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def ensure_pki() -> Path:
    pki = STATE / "pki"
    if (pki / "apiserver.crt").exists() and (pki / "tokens.csv").exists():
        return pki
    pki.mkdir(parents=True, exist_ok=True)
    os.chmod(pki, 0o700)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650", "-subj",
             "/CN=benchfarm-lab-ca", "-keyout", str(pki / "ca.key"), "-out", str(pki / "ca.crt"))
    (pki / "san.cnf").write_text(
        "[req]\ndistinguished_name=dn\n[dn]\n[ext]\nsubjectAltName=DNS:localhost,IP:127.0.0.1,"
        "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kube-apiserver",
             "-keyout", str(pki / "apiserver.key"), "-out", str(pki / "apiserver.csr"))
    _openssl("x509", "-req", "-in", str(pki / "apiserver.csr"), "-CA", str(pki / "ca.crt"),
             "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-days", "3650",
             "-extfile", str(pki / "san.cnf"), "-extensions", "ext", "-out", str(pki / "apiserver.crt"))
    _openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
    _openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))
    admin, kcm = secrets.token_hex(24), secrets.token_hex(24)
    (pki / "tokens.csv").write_text(
        f'{admin},benchfarm-admin,uid-admin,"system:masters"\n'
        f"{kcm},system:kube-controller-manager,uid-kcm\n")
    (pki / "admin.token").write_text(admin)
    (pki / "kcm.token").write_text(kcm)
    for f in pki.iterdir():
        os.chmod(f, 0o600)
    return pki


def write_kubeconfig(path: Path, token: str, user: str) -> None:
    ca = base64.b64encode((STATE / "pki" / "ca.crt").read_bytes()).decode()
    cfg = {
        "apiVersion": "v1", "kind": "Config", "current-context": "benchfarm-lab",
        "clusters": [{"name": "benchfarm-lab", "cluster": {
            "server": f"https://127.0.0.1:{PORTS.apiserver}", "certificate-authority-data": ca}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "benchfarm-lab", "context": {
            "cluster": "benchfarm-lab", "user": user, "namespace": "default"}}],
    }
    path.write_text(yaml.safe_dump(cfg))
    os.chmod(path, 0o600)


def minio_credentials() -> tuple[str, str]:
    f = STATE / "minio" / "credentials.json"
    if not f.exists():
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps({"access": "bf" + secrets.token_hex(8),
                                 "secret": secrets.token_urlsafe(30)}))
        os.chmod(f, 0o600)
    data = json.loads(f.read_text())
    return data["access"], data["secret"]
