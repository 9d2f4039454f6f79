"""The exporter hosts' sshd as the embedded lab configures it (devlab sshd.py): in the lab
network, its authorization hook included last, and the clients' ssh_config leading every name
labgrid uses for an exporter host to the host side of the crossing."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from benchfarm_devlab import labnet, sshd
from benchfarm_devlab.config import PORTS


@pytest.fixture
def started(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(sshd, "DIR", tmp_path)
    monkeypatch.setattr(sshd, "CLIENT_CONFIG", tmp_path / "config")
    monkeypatch.setattr(sshd, "AUTH_DIR", tmp_path / "auth.d")
    monkeypatch.setattr(sshd, "start_process", lambda name, argv, **kw: calls.append((name, argv)))
    if shutil.which("ssh-keygen") is None:
        pytest.skip("no ssh-keygen (openssh-client)")
    sshd.start_sshd(["vhost0", "vhost1"])
    return tmp_path, calls


def test_the_sshd_runs_in_the_lab_network_and_includes_the_authorization_hook_last(started):
    d, calls = started
    [(name, argv)] = calls
    assert name == "sshd" and argv[:4] == ["ip", "netns", "exec", labnet.NETNS]
    lines = (d / "sshd_config").read_text().splitlines()
    assert lines[0] == f"ListenAddress 127.0.0.1:{PORTS.sshd}"
    assert lines[-1] == f"Include {d / 'auth.d'}/*.conf"
    assert (d / "auth.d").stat().st_mode & 0o777 == 0o700
    binary = shutil.which("sshd") or "/usr/sbin/sshd"
    if shutil.which(binary):     # OpenSSH itself takes it, the empty glob included
        res = subprocess.run([binary, "-t", "-f", str(d / "sshd_config")], capture_output=True,
                             text=True)
        assert res.returncode == 0, res.stderr


def test_every_exporter_host_name_leads_to_the_crossing(started):
    d, _ = started
    if shutil.which("ssh") is None:
        pytest.skip("no ssh (openssh-client)")
    for host in ("vhost0", "vhost1", "127.0.0.1"):
        out = subprocess.run(["ssh", "-F", str(d / "config"), "-G", host], capture_output=True,
                             text=True, check=True).stdout.splitlines()
        opts = dict(line.split(" ", 1) for line in out if " " in line)
        assert (opts["hostname"], opts["port"]) == ("127.0.0.1", str(PORTS.sshd)), host
        assert opts["stricthostkeychecking"] == "true" and opts["batchmode"] == "yes"
