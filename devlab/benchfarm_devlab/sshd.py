"""The exporter hosts' SSH, as labgrid expects it of a lab: a client stages boot files on an
exporter (labgrid's `ManagedFile`: rsync over SSH, or only a link when the exporter sees the same
file) and links them into its TFTP directory.

The dev lab's exporter hosts are this machine, so it runs one OpenSSH server (Debian's
openssh-server) on 127.0.0.1 only, with keys of its own and no password, and writes the ssh_config
its clients use (`BENCHFARM_SSH_CONFIG`): nothing of the user's own ssh setup is read or changed.
Pods of the one-node cluster reach that sshd through the cluster's relay on the bridge address
(cluster.py); `pod_files` is what the chart mounts for them from `ssh.existingSecret`: the same
client key, an ssh_config for that address and a known_hosts that pins the sshd's host key.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from .config import HOST_ADDR, PORTS, STATE, LabError
from .processes import pids_where, port_open, start_process

DIR = STATE / "ssh"
CLIENT_CONFIG = DIR / "config"


def _keygen(path: Path) -> None:
    if not path.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "benchfarm-lab",
                        "-f", str(path)], check=True)


def start_sshd(hosts: list[str]) -> Path:
    """sshd on 127.0.0.1 for the exporter hosts' addresses `hosts` (what the exporters advertise:
    127.0.0.1, or the cluster bridge's address while it runs: all this machine); the clients'
    ssh_config, which leads each of them to that sshd."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not Path(sshd).exists():
        raise LabError("sshd is not installed (Debian package openssh-server; `make deps`)")
    DIR.mkdir(parents=True, exist_ok=True)
    DIR.chmod(0o700)
    host_key, client_key = DIR / "host_ed25519", DIR / "id_ed25519"
    _keygen(host_key)
    _keygen(client_key)
    (DIR / "authorized_keys").write_text(client_key.with_suffix(".pub").read_text())
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)   # its privilege separation directory
    (DIR / "sshd_config").write_text("\n".join([
        f"ListenAddress 127.0.0.1:{PORTS.sshd}",
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
    ]) + "\n")
    host_pub = host_key.with_suffix(".pub").read_text().split()
    (DIR / "known_hosts").write_text(f"[127.0.0.1]:{PORTS.sshd} {host_pub[0]} {host_pub[1]}\n")
    CLIENT_CONFIG.write_text("".join(
        f"Host {h}\n  HostName 127.0.0.1\n  Port {PORTS.sshd}\n  User root\n"
        f"  IdentityFile {client_key}\n"
        f"  IdentitiesOnly yes\n  UserKnownHostsFile {DIR / 'known_hosts'}\n"
        f"  StrictHostKeyChecking yes\n  BatchMode yes\n" for h in hosts))
    start_process("sshd", [sshd, "-D", "-e", "-f", str(DIR / "sshd_config")],
                  ports=[PORTS.sshd], ready=lambda: port_open(PORTS.sshd),
                  restart_on_change=True)
    return CLIENT_CONFIG


POD_DIR = "/etc/benchfarm/ssh"     # where the chart mounts ssh.existingSecret


def pod_files() -> dict[str, str]:
    """The Secret for the chart's `ssh.existingSecret` (key -> content): the client key, an
    ssh_config that leads the exporter host the exporters advertise to pods (the bridge address)
    to this sshd through the relay there, and a known_hosts with this sshd's host key for it.
    Needs start_sshd first."""
    host_pub = (DIR / "host_ed25519.pub").read_text().split()
    return {
        "config": (f"Host {HOST_ADDR}\n  HostName {HOST_ADDR}\n  Port {PORTS.sshd}\n  User root\n"
                   f"  IdentityFile {POD_DIR}/id_ed25519\n  IdentitiesOnly yes\n"
                   f"  UserKnownHostsFile {POD_DIR}/known_hosts\n  StrictHostKeyChecking yes\n"
                   "  BatchMode yes\n"),
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
