"""A person in `benchfarm lease --shell`, held open while a test acts as them: the shell copies
its lease's SSH key, certificate and ssh_config (and its environment) out, runs labgrid-client
from its PATH, and waits until the test lets it exit (the lease is then released).

`forward` tries `ssh -W HOST:PORT` through the exporter hosts' sshd with the lease's own
certificate, as a person would to reach a port labgrid does not hand them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import benchfarm_devlab as devlab
from benchfarm.lab.coordinator import Coordinator
from benchfarm.settings import Settings
from benchfarm_devlab import sshauth
from tests.stack.conftest import wait_for

SHELL = """#!/bin/sh
env > {d}/env
dir=$(dirname "$BENCHFARM_SSH_CONFIG")
cp "$BENCHFARM_SSH_CONFIG" {d}/ssh_config.lease && cp "$dir/id_lease" "$dir/id_lease-cert.pub" \\
   "$dir/known_hosts" {d}/ && echo "$dir" > {d}/private
labgrid-client -p "$LG_PLACE" power on > {d}/power 2>&1 && \\
labgrid-client -p "$LG_PLACE" power get >> {d}/power 2>&1
touch {d}/ready
while [ ! -e {d}/done ]; do sleep 0.2; done
"""


def resources_of(place: str) -> dict[str, dict]:
    """A place's resources (class -> parameters) as the coordinator publishes them."""
    env = devlab.lab_env()
    coordinator = Coordinator.from_settings(Settings.from_env(), address=env["LG_COORDINATOR"],
                                            user="lab-admin", host="stacktest")
    try:
        return coordinator.places()[place].resources
    finally:
        coordinator.close()


def sshd_takes_leases() -> str | None:
    """Why the lab's sshd would not take a lease's certificate, or None."""
    config = devlab.STATE / "ssh" / "sshd_config"
    if not sshauth.CONFIG.exists():
        return f"{sshauth.CONFIG} is missing (lab.up writes it)"
    if f"Include {sshauth.AUTH_DIR}/*.conf" not in config.read_text():
        return f"{config} does not include {sshauth.AUTH_DIR} (start the lab's sshd again)"
    return None


class LeaseShell:
    def __init__(self, d: Path, ns: str, board: str, *, duration: str = "2m",
                 user: str = "desk/erin", name: str = "ssh") -> None:
        self.d, self.ns, self.board, self.name = d, ns, board, name
        d.mkdir(parents=True, exist_ok=True)
        shell = d / "shell"
        shell.write_text(SHELL.format(d=d))
        shell.chmod(0o755)
        self.proc = subprocess.Popen(
            [str(devlab.VENV_BIN / "benchfarm"), "lease", "--board", board, "--duration",
             duration, "--user", user, "-n", ns, "--name", name, "--shell"],
            env={**os.environ, "SHELL": str(shell)}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        try:
            wait_for("the lease's shell", lambda: (d / "ready").exists() or
                     self.proc.poll() is not None, timeout=180, every=0.2)
        except BaseException:
            self.proc.kill()
            raise
        if self.proc.poll() is not None:
            raise AssertionError(f"benchfarm lease ended early: {self.proc.communicate()}")
        # the shell's environment, and its ssh_config pointed at the copies (the lease's own
        # directory goes when the shell exits; the copies let the test try the cert after)
        self.env = dict(line.split("=", 1) for line in (d / "env").read_text().splitlines()
                        if "=" in line)
        private = (d / "private").read_text().strip()
        config = (d / "ssh_config.lease").read_text().replace(private, str(d))
        (d / "ssh_config").write_text(config)
        self.host = next(line.split()[1] for line in config.splitlines()
                         if line.startswith("Host "))

    @property
    def power(self) -> str:
        return (self.d / "power").read_text()

    def ssh(self, *args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ssh", "-F", str(self.d / "ssh_config"), *args],
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def forward(self, host: str, port: int, payload: bytes = b"") -> tuple[bool, str]:
        """(whether the sshd opened host:port for the lease, what came back or why not). With a
        `payload` (a request to a server that answers and closes), opened is an answer; without,
        a forward still open after some seconds without an error (sshd asks the coordinator
        about the certificate at each login: a second or two)."""
        p = subprocess.Popen(["ssh", "-F", str(self.d / "ssh_config"), "-W", f"{host}:{port}",
                              self.host], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        assert p.stdin is not None
        p.stdin.write(payload)
        p.stdin.flush()         # stdin stays open: its end would end the forward
        try:
            p.wait(timeout=20 if payload else 8)
            running = False
        except subprocess.TimeoutExpired:
            running = True
        p.kill()
        out, err = p.communicate()
        said = (out or err).decode(errors="replace")
        if payload:
            return not running and p.returncode == 0 and bool(out), said
        return running and b"open failed" not in err and b"denied" not in err, said

    def hold_open(self, host: str, port: int) -> subprocess.Popen[bytes]:
        """An `ssh -W host:port` forward left open (its stdin kept open)."""
        return subprocess.Popen(["ssh", "-F", str(self.d / "ssh_config"), "-W", f"{host}:{port}",
                                 self.host], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)

    def finish(self) -> str:
        """Let the shell exit; benchfarm lease releases the lease. Its stderr."""
        (self.d / "done").touch()
        try:
            _, err = self.proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return err

    def close(self) -> None:
        if self.proc.poll() is None:
            self.finish()


def http_get() -> bytes:
    return b"GET / HTTP/1.0\r\nHost: x\r\n\r\n"
