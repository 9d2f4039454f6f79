"""Certificates for labgrid's coordinator: a CA, and the certificates it issues to the lab's
clients and exporters, each naming what its holder may be (`core.policy.identity`).

Made with the `cryptography` package, not the openssl command: the operator issues a short-lived
certificate for every session it launches and every lease it grants (at 1,000 boards, a process
and three temporary files each would be the slow part), and it signs a public key a person sent
(a lease's `spec.publicKey`) without ever writing or reading a key file.

A session's certificate and key reach it sealed (`seal`, `unseal`): encrypted and authenticated
with a key derived from the signing key only the operator and its sessions hold (`core.policy.trust`),
so they can travel in the session's environment — a local process's, a Job's pod spec, a warm
slot's grant ConfigMap — and whoever may read a Job or a ConfigMap of the operator's namespace
but not its Secrets learns nothing from them.

A lease's person also gets an OpenSSH user certificate for the same public key (`ssh_certificate`):
the exporter hosts' SSH lets it forward to its own place's console and power only (principal
`place:<name>`, `ssh_principal`). The labgrid issuer's key signs it too: it is the one authority
that vouches for a lease's holder, and the two signatures cannot be mistaken for one another
(an SSH certificate's signed blob starts with its type string, an X.509 one is DER).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import SSHCertificateBuilder, SSHCertificateType
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from benchfarm.api.leases import LeaseAccess, LeaseSshAccess, LeaseSshHost
from benchfarm.core.conditions import iso
from benchfarm.core.policy.identity import grant_uri
from benchfarm.settings import Settings

# the public keys a certificate is issued for: a session's (EC) or a person's (EC or RSA)
PublicKey = ec.EllipticCurvePublicKey | rsa.RSAPublicKey

# the issuer's clock may be a little ahead of the coordinator's
BACKDATE = dt.timedelta(minutes=5)
# the operator's issuing CA (file paths): it issues each session's and each lease's certificate
ENV_ISSUER_CERT, ENV_ISSUER_KEY = "BENCHFARM_LABGRID_ISSUER_CERT", "BENCHFARM_LABGRID_ISSUER_KEY"
# what binds a sealed session credential to its purpose (HKDF info and AEAD associated data)
SEAL_CONTEXT = b"benchfarm labgrid session credentials v1"


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def public_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def load_public(pem: str) -> PublicKey:
    """A public key from PEM; ValueError if it is not one, or not EC P-256/RSA ≥ 2048."""
    try:
        key = serialization.load_pem_public_key(pem.encode())
    except Exception as exc:
        raise ValueError(f"not a PEM public key: {exc}") from None
    if isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name in ("secp256r1", "secp384r1"):
        return key
    if isinstance(key, rsa.RSAPublicKey) and key.key_size >= 2048:
        return key
    raise ValueError("the public key must be EC P-256/P-384 or RSA of at least 2048 bits")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def make_ca(common_name: str, days: int = 3650) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) of a new CA."""
    key = new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE).not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), key_pem(key)


@dataclass
class Issuer:
    """A CA that issues the lab's labgrid certificates."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @classmethod
    def load(cls, cert_path: str | Path, key_path: str | Path) -> Issuer:
        cert = x509.load_pem_x509_certificate(Path(cert_path).read_bytes())
        key = serialization.load_pem_private_key(Path(key_path).read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{key_path}: the labgrid issuer's key must be an EC key")
        return cls(cert, key)

    @property
    def ca_pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    def issue(self, public_key: PublicKey, *, common_name: str,
              grants: Sequence[tuple[str, str]] = (), server_names: Sequence[str] = (),
              not_after: dt.datetime | None = None, lifetime: dt.timedelta = dt.timedelta(days=1)) -> str:
        """A certificate (PEM) for `public_key`: `grants` are (role, name) pairs it may be to the
        coordinator (client certificate); `server_names` make it a server's (DNS names or IP
        addresses). It expires at `not_after`, or `lifetime` from now, never after the CA."""
        now = _now()
        end = not_after or now + lifetime
        end = min(end, self.cert.not_valid_after_utc)
        sans: list[x509.GeneralName] = [
            x509.UniformResourceIdentifier(grant_uri(role, name)) for role, name in grants]
        for server in server_names:
            try:
                import ipaddress
                sans.append(x509.IPAddress(ipaddress.ip_address(server)))
            except ValueError:
                sans.append(x509.DNSName(server))
        usage = [ExtendedKeyUsageOID.SERVER_AUTH] if server_names else []
        if grants:
            usage.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
                   .issuer_name(self.cert.subject).public_key(public_key)
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - BACKDATE).not_valid_after(end)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage(usage), critical=False))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return builder.sign(self.key, hashes.SHA256()).public_bytes(
            serialization.Encoding.PEM).decode()

    def issue_with_key(self, *, common_name: str, grants: Sequence[tuple[str, str]] = (),
                       server_names: Sequence[str] = (), not_after: dt.datetime | None = None,
                       lifetime: dt.timedelta = dt.timedelta(days=1)) -> tuple[str, bytes]:
        """(certificate PEM, its new private key PEM): `issue` for a key made here."""
        key = new_key()
        return (self.issue(key.public_key(), common_name=common_name, grants=grants,
                           server_names=server_names, not_after=not_after, lifetime=lifetime),
                key_pem(key))


def grant_uris(cert_pem: bytes) -> list[str]:
    """The URI subject alternative names of a certificate (PEM)."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    return list(ext.value.get_values_for_type(x509.UniformResourceIdentifier))


def expiry(cert_pem: bytes | str) -> dt.datetime:
    data = cert_pem.encode() if isinstance(cert_pem, str) else cert_pem
    return x509.load_pem_x509_certificate(data).not_valid_after_utc


def write_private(path: Path, data: bytes | str) -> None:
    """Write a file only its owner reads (a key, or a certificate beside its key)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    os.replace(tmp, path)


def issuer_from(settings: Settings) -> Issuer | None:
    """The operator's issuer (BENCHFARM_LABGRID_ISSUER_CERT/_KEY), None where it has none."""
    cert, key = settings.labgrid_issuer_cert, settings.labgrid_issuer_key
    return Issuer.load(cert, key) if cert and key else None


# -- OpenSSH: a lease's way through the exporter hosts' SSH ------------------------------------
#: the principal a lease's SSH certificate carries for its place (what the exporter hosts' sshd
#: grants forwards for: `benchfarm_devlab.sshauth`)
SSH_PLACE_PRINCIPAL = "place:"
#: what a lease's SSH certificate runs on the exporter host whatever is asked: labgrid's
#: keepalive runs `ssh HOST cat`; nothing else is for a lease to run there
SSH_FORCED_COMMAND = "/bin/cat"


def ssh_principal(place: str) -> str:
    return f"{SSH_PLACE_PRINCIPAL}{place}"


def ssh_place(principal: str) -> str | None:
    """The place a principal names (`ssh_principal`'s inverse), None for another principal."""
    prefix, _, place = principal.partition(SSH_PLACE_PRINCIPAL)
    return place if not prefix and place else None


def ssh_key_id(namespace: str, name: str, uid: str) -> str:
    """The key id of a lease's SSH certificate: its namespace/name (what sshd logs) and its uid
    (a lease made again under the same name is another lease)."""
    return f"{namespace}/{name} {uid}"


def ssh_lease_uid(key_id: str) -> str | None:
    """The lease uid of `ssh_key_id`'s key id, None if it is not one."""
    name, sep, uid = key_id.rpartition(" ")
    return uid if sep and name.count("/") == 1 and uid else None


def openssh_private(key: ec.EllipticCurvePrivateKey) -> bytes:
    """A private key in OpenSSH's own format (what `ssh -i` reads)."""
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                             serialization.NoEncryption())


def ssh_public(key: PublicKey, comment: str = "") -> str:
    """A public key as one OpenSSH line (`TrustedUserCAKeys`, `authorized_keys`)."""
    line = key.public_bytes(serialization.Encoding.OpenSSH,
                            serialization.PublicFormat.OpenSSH).decode()
    return f"{line} {comment}".strip()


def ssh_ca_public(issuer: Issuer) -> str:
    """The issuer's key as the SSH user CA the exporter hosts trust (`TrustedUserCAKeys`)."""
    return ssh_public(issuer.key.public_key(), "benchfarm-lease-ca")


def ssh_certificate(issuer: Issuer, public_key: PublicKey, *, key_id: str, place: str,
                    not_after: dt.datetime) -> str:
    """An OpenSSH user certificate (one `...-cert-v01@openssh.com` line) for `public_key`:
    principal `place:<place>`, valid from a little before now until `not_after` (never after
    the issuer), forced command `SSH_FORCED_COMMAND` and no extension but port forwarding (no
    pty, agent, X11 or user rc). ValueError if that window is already over."""
    now = _now()
    end = min(not_after, issuer.cert.not_valid_after_utc)
    if end <= now:
        raise ValueError(f"the certificate would end at {iso(end)}, before now")
    cert = (SSHCertificateBuilder().public_key(public_key).type(SSHCertificateType.USER)
            .serial(int.from_bytes(os.urandom(8), "big")).key_id(key_id.encode())
            .valid_principals([ssh_principal(place).encode()])
            .valid_after(int((now - BACKDATE).timestamp())).valid_before(int(end.timestamp()))
            .add_critical_option(b"force-command", SSH_FORCED_COMMAND.encode())
            .add_extension(b"permit-port-forwarding", b"")
            .sign(issuer.key))
    return cert.public_bytes().decode()


def person_access(issuer: Issuer, coordinator_ca: str, coordinator: str, user: str,
                  public_key: str, expires: dt.datetime, *, place: str = "", key_id: str = "",
                  ssh_hosts: Sequence[LeaseSshHost] = (), known_hosts: str = "") -> dict[str, Any]:
    """A BoardLease's `status.access` (`api.leases.LeaseAccess`): a certificate for the lease's
    user (role person: it may be that user and read, never take or free a place) that expires
    with the lease, the CA that vouches for the coordinator, and where the coordinator is; with
    a `place`, also an OpenSSH certificate for the same key (`ssh_certificate`, key id `key_id`)
    and the exporter hosts it is for. ValueError for a bad key."""
    key = load_public(public_key)
    cert = issuer.issue(key, common_name=user, grants=[("person", user)], not_after=expires)
    ssh = LeaseSshAccess(
        certificate=ssh_certificate(issuer, key, key_id=key_id, place=place, not_after=expires),
        principal=ssh_principal(place), hosts=list(ssh_hosts), knownHosts=known_hosts,
    ) if place else None
    return LeaseAccess(coordinator=coordinator, certificate=cert, ca=coordinator_ca,
                       expiresAt=iso(expiry(cert)), ssh=ssh,
                       ).model_dump(mode="json", exclude_none=True)


def _seal_key(signing_key: bytes) -> AESGCM:
    return AESGCM(HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                       info=SEAL_CONTEXT).derive(signing_key))


def seal(signing_key: bytes, cert_pem: str, key_pem: bytes) -> str:
    """A session's certificate and private key as one opaque string (base64 of a random nonce
    and their AES-GCM ciphertext): only a holder of `signing_key` can read or alter it."""
    nonce = os.urandom(12)
    body = json.dumps({"cert": cert_pem, "key": key_pem.decode()}).encode()
    return base64.b64encode(nonce + _seal_key(signing_key).encrypt(nonce, body, SEAL_CONTEXT)
                            ).decode()


def unseal(signing_key: bytes, sealed: str) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) from `seal`'s string; ValueError if it was not sealed with
    this signing key, was altered or is not one."""
    try:
        raw = base64.b64decode(sealed, validate=True)
        body = json.loads(_seal_key(signing_key).decrypt(raw[:12], raw[12:], SEAL_CONTEXT))
        return body["cert"].encode(), body["key"].encode()
    except (ValueError, KeyError, TypeError, InvalidTag) as exc:
        raise ValueError("the session's labgrid credentials cannot be unsealed with this "
                         f"signing key ({type(exc).__name__})") from None
