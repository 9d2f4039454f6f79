"""A lease's holder through the exporter hosts' SSH, on the real stack: in `benchfarm lease
--shell` labgrid-client drives the place's power and opens its console; the lease's own OpenSSH
certificate forwards to that place's console and power ports and to nothing else (another
place's console or power, the coordinator, the API server), runs no command and listens for
nothing; once the lease is released the same certificate, not yet expired, gets nowhere.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from datetime import UTC, datetime

import pexpect
import pytest
import yaml

import benchfarm_devlab as devlab
from benchfarm_devlab.sshauth import forwards
from tests.stack.conftest import apply
from tests.stack.leaseshell import LeaseShell, http_get, resources_of, sshd_takes_leases
from tests.stack.runs import GROUP, VERSION

pytestmark = pytest.mark.stack

OWN, OTHER = "vb-x86-0", "vb-x86-1"


@pytest.fixture(scope="module")
def lease_ns(kube, operator):
    """A fresh namespace that may lease for 5 minutes (the lab's policy put back after)."""
    from kubernetes import client
    ns = f"lease-ssh-{uuid.uuid4().hex[:5]}"
    client.CoreV1Api(kube).create_namespace({"metadata": {"name": ns}})
    apply(yaml.safe_dump({"apiVersion": f"{GROUP}/{VERSION}", "kind": "LabPolicy",
                          "metadata": {"name": "default"}, "spec": {"namespaces": [
                              {"namespace": ns,
                               "leases": {"allowed": True, "maxLeaseSeconds": 300}}]}}))
    yield ns
    devlab.lab.apply_lab_policy()
    client.CoreV1Api(kube).delete_namespace(ns)


def test_a_lease_reaches_its_own_places_console_and_power_through_ssh_and_nothing_else(
        kube, lease_ns, tmp_path):
    from kubernetes import client
    assert (why := sshd_takes_leases()) is None, why
    mine = resources_of(OWN)
    own, other = forwards(mine), forwards(resources_of(OTHER))
    power = forwards({"NetworkPowerPort": mine["NetworkPowerPort"]})[0]
    assert len(own) == 2, own          # a console and a power switch
    person = LeaseShell(tmp_path / "erin", lease_ns, OWN)
    try:
        # the shell's labgrid-client (first on its PATH) is labgrid's own with the lease's
        # ssh_config: power and console work
        private = (tmp_path / "erin" / "private").read_text().strip()
        assert person.env["PATH"].split(":")[0] == f"{private}/bin", person.env["PATH"]
        assert person.env["BENCHFARM_SSH_CONFIG"] == f"{private}/ssh_config"
        assert f"power for place {OWN} is on" in person.power, person.power
        console = pexpect.spawn(f"{private}/bin/labgrid-client",
                                ["-p", OWN, "console"], env=person.env, timeout=40,
                                encoding="utf-8", codec_errors="replace")
        try:
            console.expect("connected to")
        finally:
            console.close(force=True)

        cert = (tmp_path / "erin" / "id_lease-cert.pub").read_text()
        assert cert.startswith("ecdsa-sha2-nistp256-cert-v01@openssh.com ")
        # its own console and power: opened (the power switch answers HTTP)
        for host, port in own:
            opened, said = person.forward(host, port, http_get() if (host, port) == power else b"")
            assert opened, (host, port, said)
            assert (host, port) != power or said.startswith("HTTP/"), said
        # another place's console and power, the lab's services: refused by the sshd
        refused = [*(p for p in other if p not in own),
                   ("127.0.0.1", devlab.PORTS.coordinator), ("127.0.0.1", devlab.PORTS.apiserver),
                   ("localhost", own[0][1])]     # its own port under another name: not the same
        assert refused
        for host, port in refused:
            opened, said = person.forward(host, port, http_get())
            assert not opened, (host, port, said)
        # no command of its own (a forced cat), no listening port on the exporter host
        ran = person.ssh(person.host, "id")
        assert "uid=" not in ran.stdout, ran
        listen = person.ssh("-o", "ExitOnForwardFailure=yes", "-N", "-R", "127.0.0.1:0:127.0.0.1:1",
                            person.host)
        assert listen.returncode != 0, listen
        # a connection made while the lease holds, left open (to the power switch, which keeps
        # an idle connection: the board's power going off ends nothing): it ends with the lease
        kept = person.hold_open(*power)
        time.sleep(6)
        assert kept.poll() is None, kept.communicate()
    finally:
        err = person.finish()
    assert "released" in err, err
    st = client.CustomObjectsApi(kube).get_namespaced_custom_object(
        GROUP, VERSION, lease_ns, "boardleases", "ssh")["status"]
    assert st["phase"] == "Ended", st
    # released early: the certificate still runs a while, and gets nowhere
    assert datetime.fromisoformat(st["access"]["expiresAt"].replace("Z", "+00:00")) > \
        datetime.now(UTC)
    for host, port in own:
        opened, said = person.forward(host, port)
        assert not opened and "Permission denied" in said, (host, port, said)
    # the connection opened during the lease was ended once its place was released
    try:
        kept.wait(timeout=20)
    except subprocess.TimeoutExpired:
        kept.kill()
        raise AssertionError("a connection made during the lease outlived it") from None
