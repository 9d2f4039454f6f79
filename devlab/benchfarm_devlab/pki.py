"""The lab's credentials: a CA and the API server's certificate, tokens, kubeconfigs, MinIO keys,
client certificates (the API server's to kubelets, the node components' of the one-node cluster).

Made once under `.benchfarm/pki` (mode 0700) and reused by every later `lab up`.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import secrets
import subprocess
from pathlib import Path

import yaml

from benchfarm_devlab.config import HOST_ADDR, PORTS, SERVICE_IP, STATE


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


# The API server's names: 127.0.0.1 for the lab's own clients; the kubernetes Service's address and
# the pods' host address (config.HOST_ADDR) for pods of the one-node cluster (cluster/).
SAN_CNF = ("[req]\ndistinguished_name=dn\n[dn]\n[ext]\nsubjectAltName=DNS:localhost,IP:127.0.0.1,"
           "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,"
           f"DNS:kubernetes.default.svc.cluster.local,IP:{SERVICE_IP},IP:{HOST_ADDR}\n"
           "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
           "extendedKeyUsage=serverAuth\n")


def ensure_pki() -> Path:
    pki = STATE / "pki"
    if (pki / "apiserver.crt").exists() and (pki / "tokens.csv").exists():
        if (pki / "san.cnf").read_text() != SAN_CNF:   # a lab made before the names changed
            _apiserver_cert(pki)                       # the API server reloads it by itself
        client_cert("apiserver-kubelet-client", "kube-apiserver-kubelet-client")
        return pki
    pki.mkdir(parents=True, exist_ok=True)
    os.chmod(pki, 0o700)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650", "-subj",
             "/CN=benchfarm-lab-ca", "-keyout", str(pki / "ca.key"), "-out", str(pki / "ca.crt"))
    _apiserver_cert(pki)
    _openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
    _openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))
    admin, kcm = secrets.token_hex(24), secrets.token_hex(24)
    (pki / "tokens.csv").write_text(
        f'{admin},benchfarm-admin,uid-admin,"system:masters"\n'
        f"{kcm},system:kube-controller-manager,uid-kcm\n")
    (pki / "admin.token").write_text(admin)
    (pki / "kcm.token").write_text(kcm)
    client_cert("apiserver-kubelet-client", "kube-apiserver-kubelet-client")
    for f in pki.iterdir():
        os.chmod(f, 0o600)
    return pki


def _apiserver_cert(pki: Path) -> None:
    (pki / "san.cnf").write_text(SAN_CNF)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kube-apiserver",
             "-keyout", str(pki / "apiserver.key.new"), "-out", str(pki / "apiserver.csr"))
    _openssl("x509", "-req", "-in", str(pki / "apiserver.csr"), "-CA", str(pki / "ca.crt"),
             "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-days", "3650",
             "-extfile", str(pki / "san.cnf"), "-extensions", "ext", "-out", str(pki / "apiserver.crt.new"))
    for name in ("apiserver.key", "apiserver.crt"):   # key first: a reload never pairs a new cert
        os.chmod(pki / f"{name}.new", 0o600)          # with the old key for long
        os.replace(pki / f"{name}.new", pki / name)


def client_cert(name: str, cn: str, org: str | None = None) -> tuple[Path, Path]:
    """A client certificate of the lab's CA (`pki/<name>.crt`, `.key`), made once: the
    identities of the node's components (system:node:<node>, system:kube-proxy, ...)."""
    pki = STATE / "pki"
    crt, key = pki / f"{name}.crt", pki / f"{name}.key"
    if crt.exists() and key.exists():
        return crt, key
    subj = f"/CN={cn}" + (f"/O={org}" if org else "")
    ext = pki / f"{name}.cnf"
    ext.write_text("[ext]\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                   "extendedKeyUsage=clientAuth\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subj, "-keyout", str(key),
             "-out", str(pki / f"{name}.csr"))
    _openssl("x509", "-req", "-in", str(pki / f"{name}.csr"), "-CA", str(pki / "ca.crt"),
             "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-days", "3650",
             "-extfile", str(ext), "-extensions", "ext", "-out", str(crt))
    for f in (crt, key):
        os.chmod(f, 0o600)
    return crt, key


def write_kubeconfig(path: Path, token: str | None, user: str,
                     cert: tuple[Path, Path] | None = None) -> None:
    """A kubeconfig for the lab's API server with a token, or with a client certificate (crt, key)."""
    ca = base64.b64encode((STATE / "pki" / "ca.crt").read_bytes()).decode()
    creds = {"token": token} if cert is None else {
        "client-certificate": str(cert[0]), "client-key": str(cert[1])}
    cfg = {
        "apiVersion": "v1", "kind": "Config", "current-context": "benchfarm-lab",
        "clusters": [{"name": "benchfarm-lab", "cluster": {
            "server": f"https://127.0.0.1:{PORTS.apiserver}", "certificate-authority-data": ca}}],
        "users": [{"name": user, "user": creds}],
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


# -- labgrid's coordinator: a CA of its own, certificates for every party ------------------------
# Made with benchfarm's own issuer (benchfarm.lab.labgrid_pki, the `cryptography` package): the
# operator issues its sessions' and leases' certificates with the same code, from the same CA.
LABGRID = "labgrid"
OPERATOR_IDENTITY = "operator/benchfarm"     # the chart's labgrid.host/labgrid.user defaults
LAB_ADMIN_IDENTITY = "benchfarm-lab/lab-admin"


def labgrid_dir() -> Path:
    return STATE / "pki" / LABGRID


def labgrid_files(name: str) -> dict[str, str]:
    """BENCHFARM_LABGRID_CA/_CERT/_KEY for the certificate `name` of the lab's labgrid CA."""
    d = labgrid_dir()
    return {"BENCHFARM_LABGRID_CA": str(d / "ca.crt"),
            "BENCHFARM_LABGRID_CERT": str(d / f"{name}.crt"),
            "BENCHFARM_LABGRID_KEY": str(d / f"{name}.key")}


def _labgrid_cert(name: str, **kwargs) -> None:
    from benchfarm.lab.labgrid_pki import Issuer, write_private
    d = labgrid_dir()
    if (d / f"{name}.crt").exists() and (d / f"{name}.key").exists():
        return
    cert, key = Issuer.load(d / "ca.crt", d / "ca.key").issue_with_key(
        common_name=name, lifetime=dt.timedelta(days=3650), **kwargs)
    write_private(d / f"{name}.key", key)
    write_private(d / f"{name}.crt", cert)


def ensure_labgrid_pki(exporters: list[str]) -> Path:
    """The labgrid CA (`pki/labgrid/ca.*`, made once) and its certificates: the coordinator's
    (a server's, for 127.0.0.1 and the pods' host address), the operator's (it may be
    `operator/benchfarm` and every `benchfarm/*`, and holds the CA's key to issue its sessions'
    and leases' own), the lab administrator's (`.benchfarm/env`: any name, as the lab's admin
    kubeconfig is any user), and one per exporter (that exporter only)."""
    from benchfarm.lab.labgrid_pki import make_ca, write_private
    d = labgrid_dir()
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not (d / "ca.crt").exists() or not (d / "ca.key").exists():
        cert, key = make_ca("benchfarm-lab labgrid CA")
        write_private(d / "ca.key", key)
        write_private(d / "ca.crt", cert)
    _labgrid_cert("coordinator", server_names=["127.0.0.1", "localhost", HOST_ADDR])
    _labgrid_cert("operator", grants=[("operator", OPERATOR_IDENTITY), ("operator", "benchfarm/*")])
    _labgrid_cert("lab-admin", grants=[("operator", "*")])
    for name in exporters:
        _labgrid_cert(f"exporter-{name}", grants=[("exporter", name)])
    return d


def labgrid_tls(name: str):  # noqa: ANN201  (benchfarm.lab.labgrid_compat.TlsSettings)
    from benchfarm.lab.labgrid_compat import TlsSettings
    from benchfarm.settings import Settings
    return TlsSettings.from_settings(Settings.from_env(labgrid_files(name)))
