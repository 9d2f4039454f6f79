"""The exporter hosts' SSH, as labgrid expects it of a lab: the one way from the host into the
lab network (labnet.py), where the boards' consoles and power switches are. labgrid's clients
forward every resource of an `--isolated` exporter through its host's SSH (`ssh -L`, by
`extra.proxy`), and stage boot files there (labgrid's `ManagedFile`: rsync over SSH, or only a
link when the exporter sees the same file) for its TFTP directory.

The dev lab's exporter hosts are one OpenSSH server (Debian's openssh-server) in the lab network,
on its 127.0.0.1:PORTS.sshd, with keys of its own and no password; the host reaches it at its own
127.0.0.1:PORTS.sshd through the lab network's gate (labnet.start_gate). It writes the ssh_config
its clients use (`BENCHFARM_SSH_CONFIG`: each exporter host's name, `vhost0` ..., as labgrid
publishes it in `extra.proxy`, and 127.0.0.1, the host the exporters publish their resources
under, for the staging): nothing of the user's own ssh setup is read or changed. Its config ends
with `Include STATE/ssh/auth.d/*.conf`: who else may log in and forward where (the leases'
certificates, sshauth.py) is written there, by that module only. Pods of the one-node cluster
reach the gate through the cluster's relay on the bridge address (cluster/); `pod_files` is
what the chart mounts for them from `ssh.existingSecret`: the same client key, an ssh_config
that leads the same names to that address and a known_hosts that pins the sshd's host key.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from benchfarm_devlab import labnet
from benchfarm_devlab.boards import load_inventory
from benchfarm_devlab.config import HOST_ADDR, PORTS, STATE, LabError
from benchfarm_devlab.processes import pids_where, start_process

DIR = STATE / "ssh"
CLIENT_CONFIG = DIR / "config"
AUTH_DIR = DIR / "auth.d"       # sshd_config's Include: the leases' authorization (sshauth.py)


def _keygen(path: Path) -> None:
    if not path.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "benchfarm-lab",
                        "-f", str(path)], check=True)


def _host_entries(names: list[str], hostname: str, port: int, key: str, known_hosts: str) -> str:
    return "".join(
        f"Host {h}\n  HostName {hostname}\n  Port {port}\n  User root\n  IdentityFile {key}\n"
        f"  IdentitiesOnly yes\n  UserKnownHostsFile {known_hosts}\n"
        f"  StrictHostKeyChecking yes\n  BatchMode yes\n" for h in names)


def client_names(exporters: list[str]) -> list[str]:
    """The names the lab's ssh_config leads to the sshd: each exporter host (labgrid's
    `extra.proxy`) and 127.0.0.1, the host of their resources (labgrid's ManagedFile stages
    to a resource's host)."""
    return [*exporters, "127.0.0.1", "localhost"]


def start_sshd(exporters: list[str]) -> Path:
    """The sshd of the exporter hosts `exporters` (the inventory's names) in the lab network,
    reached at the host's 127.0.0.1:PORTS.sshd (start labnet.start_inner_relay before and
    labnet.start_gate after); the clients' ssh_config, which leads each of them to it."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not Path(sshd).exists():
        raise LabError("sshd is not installed (Debian package openssh-server; `make deps`)")
    DIR.mkdir(parents=True, exist_ok=True)
    DIR.chmod(0o700)
    AUTH_DIR.mkdir(mode=0o700, exist_ok=True)
    host_key, client_key = DIR / "host_ed25519", DIR / "id_ed25519"
    _keygen(host_key)
    _keygen(client_key)
    (DIR / "authorized_keys").write_text(client_key.with_suffix(".pub").read_text())
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)   # its privilege separation directory
    (DIR / "sshd_config").write_text("\n".join([
        f"ListenAddress 127.0.0.1:{PORTS.sshd}",     # the lab network's own loopback
        f"HostKey {host_key}",
        f"PidFile {DIR / 'sshd.pid'}",
        f"AuthorizedKeysFile {DIR / 'authorized_keys'}",
        "PermitRootLogin prohibit-password",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",
        "X11Forwarding no",
        "AllowTcpForwarding yes",     # labgrid forwards ports through its SSH connections
        "MaxSessions 64",
        "MaxStartups 64:30:128",
        "Subsystem sftp internal-sftp",
        "LogLevel ERROR",
        # last: what sshauth.py writes there (an empty glob is fine) may add Match blocks
        f"Include {AUTH_DIR}/*.conf",
    ]) + "\n")
    host_pub = host_key.with_suffix(".pub").read_text().split()
    (DIR / "known_hosts").write_text(f"[127.0.0.1]:{PORTS.sshd} {host_pub[0]} {host_pub[1]}\n")
    CLIENT_CONFIG.write_text(_host_entries(client_names(exporters), "127.0.0.1", PORTS.sshd,
                                           str(client_key), str(DIR / "known_hosts")))
    start_process("sshd", labnet.inside([sshd, "-D", "-e", "-f", str(DIR / "sshd_config")]),
                  ports=[], ready=lambda: labnet.ssh_answers_inside(PORTS.sshd),
                  restart_on_change=True)
    return CLIENT_CONFIG


POD_DIR = "/etc/benchfarm/ssh"     # where the chart mounts ssh.existingSecret


def exporter_hosts() -> list[str]:
    """The inventory's exporter hosts' names."""
    return [exp["name"] for exp in load_inventory()["exporters"]]


def pod_files() -> dict[str, str]:
    """The Secret for the chart's `ssh.existingSecret` (key -> content): the client key, an
    ssh_config that leads the exporter hosts (and 127.0.0.1, their resources' host) to the lab
    network's gate through the cluster's relay on the bridge address, and a known_hosts with
    the sshd's host key for it. Needs start_sshd first."""
    exporters = exporter_hosts()
    host_pub = (DIR / "host_ed25519.pub").read_text().split()
    return {
        "config": _host_entries(client_names(exporters), HOST_ADDR, PORTS.sshd,
                                f"{POD_DIR}/id_ed25519", f"{POD_DIR}/known_hosts"),
        "id_ed25519": (DIR / "id_ed25519").read_text(),
        "known_hosts": f"[{HOST_ADDR}]:{PORTS.sshd} {host_pub[0]} {host_pub[1]}\n",
    }


def stop_masters() -> int:
    """Stop the ssh ControlMasters labgrid's clients opened with this lab's ssh_config: they
    persist (`ControlPersist=300`) for minutes after the session that staged its files ended.
    Another lab's (another state directory's) are left alone. How many were stopped."""
    config = str(CLIENT_CONFIG).encode()
    stopped = 0
    for pid in pids_where(lambda argv: argv[0].endswith(b"ssh") and config in argv
                          and b"ControlMaster=yes" in argv):
        try:
            os.kill(pid, signal.SIGTERM)
            stopped += 1
        except ProcessLookupError:
            pass
    return stopped
