"""The exporter hosts' SSH as a lease's holder reaches it: which hosts, at which address, with
which host keys (`exporter_hosts`, what the operator hands in a lease's `status.access.ssh`), and
the ssh_config `benchfarm lease --shell` writes from that for the lease's key and certificate
(`client_config`).

labgrid's clients forward a place's console and power through the SSH of the exporter host each
resource names (`extra.proxy`). The operator knows those hosts as its own ssh_config
(BENCHFARM_SSH_CONFIG) leads to them; `ssh -G` reads that file (ssh is its only faithful
reader), and the lease gets each named host's address, port and user, and the known_hosts lines
that pin them: never the lab's own key, which the file also names.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from benchfarm.api.leases import LeaseSshHost

# the hosts and known_hosts one lease is handed at most (status.access.ssh)
MAX_HOSTS = 64
MAX_KNOWN_HOSTS = 64 * 1024


def _names(config: str) -> list[str]:
    """The plain host names of an ssh_config's `Host` lines (patterns and negations are not
    hosts anyone can be led to)."""
    names: list[str] = []
    for line in config.splitlines():
        word, _, rest = line.strip().partition(" ")
        if word.lower() != "host":
            continue
        names += [n for n in rest.split() if not any(c in n for c in "*?!") and n not in names]
    return names


def _resolved(config: Path, name: str) -> dict[str, str]:
    """`ssh -G`'s view of one host: option -> value (the first of each)."""
    out = subprocess.run(["ssh", "-G", "-F", str(config), name], capture_output=True, text=True,
                         timeout=10, check=True).stdout
    options: dict[str, str] = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        options.setdefault(key, value)
    return options


def exporter_hosts(config_path: str) -> tuple[list[LeaseSshHost], str]:
    """(the hosts of the ssh_config at `config_path`, the known_hosts lines for them); nothing
    where there is no such file. OSError/CalledProcessError where ssh cannot read it."""
    if not config_path or not Path(config_path).is_file():
        return [], ""
    config = Path(config_path)
    hosts: list[LeaseSshHost] = []
    known: list[str] = []
    for name in _names(config.read_text())[:MAX_HOSTS]:
        o = _resolved(config, name)
        hosts.append(LeaseSshHost(name=name, hostName=o.get("hostname", name),
                                  port=int(o.get("port", "22")), user=o.get("user", "root")))
        for file in o.get("userknownhostsfile", "").split():
            path = Path(file).expanduser()
            if path.is_file():
                known += [ln for ln in path.read_text().splitlines()
                          if ln.strip() and not ln.startswith("#") and ln not in known]
    text = "".join(f"{ln}\n" for ln in known)
    return hosts, text[:MAX_KNOWN_HOSTS]


def client_config(hosts: Sequence[LeaseSshHost], *, key: Path, certificate: Path,
                  known_hosts: Path) -> str:
    """An ssh_config that leads each host to its address with the lease's key and certificate
    only, checking the host key against `known_hosts` (never asking)."""
    return "".join(
        f"Host {h.name}\n  HostName {h.hostName}\n  Port {h.port}\n  User {h.user}\n"
        f"  IdentityFile {key}\n  CertificateFile {certificate}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {known_hosts}\n  GlobalKnownHostsFile none\n"
        "  StrictHostKeyChecking yes\n  BatchMode yes\n  ForwardAgent no\n" for h in hosts)
