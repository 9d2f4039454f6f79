"""Who the exporter hosts' SSH lets in besides the lab: a BoardLease's holder, with the OpenSSH
certificate the operator signed for the lease (`benchfarm.lab.labgrid_pki.ssh_certificate`),
to forward to its own place's console and power and nowhere else.

`write_config` writes `<STATE>/ssh/auth.d/leases.conf`, which the sshd_config includes (sshd.py):
the lab's labgrid issuer as the SSH user CA (`TrustedUserCAKeys`), and a principals command
(`AuthorizedPrincipalsCommand`, this module's `main`) that sshd runs for every certificate:

- the certificate's principal `place:P` counts only while P is held for that very lease (the
  coordinator says P is acquired under the lease's identity, whose uid the key id carries): a
  lease released early, ended or made again under its name lets nothing in, though its
  certificate has not expired;
- it then gets `restrict,port-forwarding,permitopen=...` with exactly the host:port pairs of P's
  console and power as the coordinator publishes them (ser2net's port is whatever the exporter
  picked), a forced `cat` (labgrid's keepalive), and no remote or UNIX-socket forwarding.

The lab's own key (`authorized_keys`, sessions and the lab admin) stays unrestricted. sshd
decides at login; a connection made while the lease held is ended within seconds of the place
being released (`watch`, a process per lease login that asks the coordinator again).
The command runs as root (`AuthorizedPrincipalsCommandUser`): it reads the lab admin's labgrid
certificate, which only root reads here, to ask the coordinator.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from benchfarm_devlab.config import STATE, VENV_BIN

AUTH_DIR = STATE / "ssh" / "auth.d"
CONFIG = AUTH_DIR / "leases.conf"
CA_KEYS = AUTH_DIR / "lease-ca.pub"
COMMAND = AUTH_DIR / "lease-principals"
# labgrid's default port of a PDUDaemonPort's daemon
PDUDAEMON_PORT = 16421
# how long the principals command waits for the coordinator (sshd's LoginGraceTime is longer)
COORDINATOR_TIMEOUT = 15.0
# how often a lease's login looks whether its place is still held for the lease (`watch`)
WATCH_SECONDS = 3.0


def _host_port(host: str, default: int | None) -> tuple[str, int] | None:
    """`host[:port]` or a URL (`http://h:p/path`) as (host, port); None if it names no port."""
    split = urlsplit(host if "//" in host else f"//{host}")
    try:
        port = split.port
    except ValueError:
        return None
    if not split.hostname:
        return None
    if port is None:
        port = default if "//" not in host else {"http": 80, "https": 443}.get(split.scheme)
    return (split.hostname, port) if port else None


def forwards(resources: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, int]]:
    """The (host, port) pairs a place's resources (class -> parameters, as the coordinator
    publishes them) are reached at: its serial console and its power switch, nothing else it
    has (a TFTP directory, a sigrok device: no port)."""
    out: list[tuple[str, int]] = []
    for cls, params in sorted(resources.items()):
        host = params.get("host")
        if not isinstance(host, str) or not host:
            continue
        if "SerialPort" in cls:
            port = params.get("port")
            pair = (host, port) if isinstance(port, int) and port > 0 else None
        elif cls == "PDUDaemonPort":
            pair = _host_port(host, PDUDAEMON_PORT)
        elif "PowerPort" in cls:
            pair = _host_port(host, None)
        else:
            continue
        if pair and pair not in out:
            out.append(pair)
    return out


def _permitopen(host: str, port: int) -> str:
    return f'permitopen="{f"[{host}]" if ":" in host else host}:{port}"'


def principals_line(place: str, opens: Sequence[tuple[str, int]]) -> str:
    """The authorized_principals line for a lease of `place`: port forwarding to `opens` only,
    no pty, agent, X11, remote forwarding or rc, the forced command of the certificate."""
    from benchfarm.lab.labgrid_pki import SSH_FORCED_COMMAND, ssh_principal
    if not opens:
        raise ValueError(f"{place}: no console or power to forward to")
    options = ["restrict", "port-forwarding", 'permitlisten="localhost:1"',
               f'command="{SSH_FORCED_COMMAND}"', *(_permitopen(h, p) for h, p in opens)]
    return f"{','.join(options)} {ssh_principal(place)}"


def lease_lines(key_id: str, cert_principals: Iterable[str],
                acquired: Mapping[str, tuple[str | None, Mapping[str, Mapping[str, Any]]]]
                ) -> list[str]:
    """What the principals command prints for a certificate: a line per `place:P` principal
    whose place is held for the lease the key id names. `acquired`: place -> (holder,
    resources) as the coordinator has them."""
    from benchfarm.api.places import lease_uid_of
    from benchfarm.lab.labgrid_pki import ssh_lease_uid, ssh_place
    uid = ssh_lease_uid(key_id)
    lines = []
    for principal in cert_principals:
        place = ssh_place(principal)
        if uid is None or place is None or place not in acquired:
            continue
        holder, resources = acquired[place]
        opens = forwards(resources)
        if lease_uid_of(holder) == uid and opens:
            lines.append(principals_line(place, opens))
    return lines


def _certificate(key_type: str, blob: str) -> Any:
    from cryptography.hazmat.primitives.serialization import (
        SSHCertificate,
        load_ssh_public_identity,
    )
    cert = load_ssh_public_identity(f"{key_type} {blob}".encode())
    if not isinstance(cert, SSHCertificate):
        raise ValueError("not a certificate")
    return cert


def principals(key_type: str, blob: str) -> tuple[list[str], str | None, list[str]]:
    """The principals command: (the lines for the certificate sshd passes (%t %k), the lease
    uid its key id names, the places they grant), asking the coordinator, as the lab admin, who
    holds the places it names."""
    from benchfarm.lab.labgrid_pki import ssh_lease_uid, ssh_place
    cert = _certificate(key_type, blob)
    names = [p.decode() for p in cert.valid_principals]
    key_id = cert.key_id.decode()
    acquired = {n: (p.acquired, p.resources) for n, p in _places().items()}
    granted = [str(ssh_place(n)) for n in names if lease_lines(key_id, [n], acquired)]
    return lease_lines(key_id, names, acquired), ssh_lease_uid(key_id), granted


def _places() -> dict[str, Any]:
    from benchfarm.lab.coordinator import Coordinator
    from benchfarm.lab.labgrid_compat import TlsSettings
    from benchfarm.settings import Settings
    from benchfarm_devlab.env import lab_env
    env = lab_env()
    coordinator = Coordinator(env["LG_COORDINATOR"], user="lab-admin", host="benchfarm-sshd",
                              timeout=COORDINATOR_TIMEOUT, tls=TlsSettings.from_settings(Settings.from_env(env)))
    try:
        return coordinator.places()
    finally:
        coordinator.close()


def held(uid: str, places: Iterable[str], now: Mapping[str, Any]) -> bool:
    """Whether any of `places` is still held for lease `uid` (`now`: place -> PlaceInfo)."""
    from benchfarm.api.places import lease_uid_of
    return any(lease_uid_of(now[p].acquired) == uid for p in places if p in now)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def watch(uid: str, sshd: int, places: Sequence[str]) -> None:
    """Until login `sshd` (the connection's privileged sshd process, the principals command's
    parent) ends: once none of `places` is held for the lease any more, end it (SIGTERM), so a
    connection made while the lease held does not outlive it. A coordinator that does not
    answer is asked again at the next look."""
    while _alive(sshd):
        time.sleep(WATCH_SECONDS)
        try:
            now = _places()
        except Exception:     # noqa: BLE001 -- an outage: the login stays until it is known
            continue
        if not held(uid, places, now):
            with contextlib.suppress(ProcessLookupError):
                os.kill(sshd, signal.SIGTERM)
            return


def _start_watch(uid: str, places: Sequence[str]) -> None:
    """`watch` this login in a process of its own, detached from sshd's pipes (sshd reads
    the command's output to its end)."""
    subprocess.Popen([sys.executable, "-c", "import sys; from benchfarm_devlab.sshauth import "
                      "watch; watch(sys.argv[1], int(sys.argv[2]), sys.argv[3:])",
                      uid, str(os.getppid()), *places],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True)


def write_config() -> tuple[str, ...]:
    """auth.d/leases.conf, the CA key it trusts and the principals command it runs (sshd
    needs the command owned by root and writable by no one else). Returns the sshd_config
    lines it wrote, for the caller's log."""
    from benchfarm.lab.labgrid_pki import Issuer, ssh_ca_public
    from benchfarm_devlab.pki import labgrid_dir
    AUTH_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    d = labgrid_dir()
    CA_KEYS.write_text(ssh_ca_public(Issuer.load(d / "ca.crt", d / "ca.key")) + "\n")
    COMMAND.write_text(f"#!/bin/sh\n# the exporter hosts' sshd asks this which places a lease's "
                       f"certificate may reach (benchfarm_devlab.sshauth)\nBENCHFARM_STATE='{STATE}' "
                       f"exec '{VENV_BIN / 'python'}' -c 'import sys; from benchfarm_devlab."
                       f"sshauth import main; sys.exit(main(sys.argv[1:]))' \"$@\"\n")
    COMMAND.chmod(0o755)
    lines = (f"TrustedUserCAKeys {CA_KEYS}",
             f"AuthorizedPrincipalsCommand {COMMAND} %t %k",
             "AuthorizedPrincipalsCommandUser root",
             # a lease forwards TCP to its permitopen pairs; never to a UNIX socket of the host
             "AllowStreamLocalForwarding no")
    CONFIG.write_text("# BoardLeases' SSH certificates (benchfarm_devlab.sshauth)\n"
                      + "\n".join(lines) + "\n")
    return lines


def main(argv: Sequence[str]) -> int:
    """sshd's AuthorizedPrincipalsCommand: `KEY_TYPE BASE64_CERTIFICATE`; prints nothing (no
    way in) for anything it cannot vouch for, saying why on stderr (sshd's log)."""
    if len(argv) != 2:
        print("usage: python -m benchfarm_devlab.sshauth KEY_TYPE BASE64_CERTIFICATE",
              file=sys.stderr)
        return 2
    try:
        lines, uid, places = principals(argv[0], argv[1])
    except Exception as exc:     # noqa: BLE001 -- sshd only sees the output: none is no entry
        print(f"benchfarm lease principals: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if lines and uid:
        _start_watch(uid, places)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
