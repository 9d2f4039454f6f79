"""A lease's way through the exporter hosts' SSH, its pure parts: the OpenSSH certificate the
operator signs (`lab.labgrid_pki.ssh_certificate`), what the sshd's principals command grants
for it (`benchfarm_devlab.sshauth`), the hosts handed in status.access and the ssh_config the
lease shell writes (`lab.lease_ssh`), and the shell's labgrid-client (`lab.labgrid_forward`)."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import (
    SSHCertificate,
    SSHCertificateType,
    load_ssh_public_identity,
)

from benchfarm.api.leases import LeaseAccess, LeaseSshHost
from benchfarm.api.places import lease_identity
from benchfarm.lab import labgrid_pki as pki
from benchfarm.lab.labgrid_forward import client_command
from benchfarm.lab.lease_ssh import _names, client_config, exporter_hosts
from benchfarm_devlab import sshauth

UID = "0b6f3c9e-5a5e-4a1e-9d43-3c1b5f0e7a21"
# vb-x86-1's resources as the coordinator publishes them (the embedded lab)
X86_1 = {
    "NetworkPowerPort": {"host": "http://127.0.0.1:21081/outlet/{index}/{value}", "index": 1,
                         "model": "simplerest"},
    "NetworkSerialPort": {"host": "127.0.0.1", "protocol": "raw", "port": 21101,
                          "speed": 115200},
    "RemoteTFTPProvider": {"host": "127.0.0.1", "internal": "/srv/tftp/vb-x86-1/",
                           "external": ""},
    "SigrokDevice": {"driver": "demo"},
}


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> pki.Issuer:
    d = tmp_path_factory.mktemp("ca")
    cert, key = pki.make_ca("unit CA")
    pki.write_private(d / "ca.crt", cert)
    pki.write_private(d / "ca.key", key)
    return pki.Issuer.load(d / "ca.crt", d / "ca.key")


def _parse(line: str) -> SSHCertificate:
    cert = load_ssh_public_identity(line.encode())
    assert isinstance(cert, SSHCertificate)
    return cert


def test_a_lease_ssh_certificate_names_its_place_and_lease_and_allows_port_forwarding_only(
        issuer: pki.Issuer) -> None:
    key = pki.new_key()
    end = dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(minutes=30)
    line = pki.ssh_certificate(issuer, key.public_key(), key_id=pki.ssh_key_id("team-a", "l1", UID),
                               place="vb-x86-1", not_after=end)
    cert = _parse(line)
    cert.verify_cert_signature()
    assert cert.signature_key().public_numbers() == issuer.key.public_key().public_numbers()
    assert pki.ssh_public(cert.signature_key()) == pki.ssh_ca_public(issuer).rsplit(" ", 1)[0]
    assert cert.public_key().public_numbers() == key.public_key().public_numbers()
    assert cert.type == SSHCertificateType.USER
    assert cert.key_id == f"team-a/l1 {UID}".encode()
    assert cert.valid_principals == [b"place:vb-x86-1"]
    assert cert.valid_before == int(end.timestamp())
    assert cert.valid_after <= int(dt.datetime.now(dt.UTC).timestamp())
    assert cert.critical_options == {b"force-command": b"/bin/cat"}
    assert cert.extensions == {b"permit-port-forwarding": b""}
    # OpenSSH reads the key as ssh -i takes it
    assert pki.openssh_private(key).startswith(b"-----BEGIN OPENSSH PRIVATE KEY-----")


def test_a_lease_ssh_certificate_ends_no_later_than_its_ca_and_never_before_now(
        issuer: pki.Issuer) -> None:
    key = pki.new_key().public_key()
    late = issuer.cert.not_valid_after_utc + dt.timedelta(days=30)
    cert = _parse(pki.ssh_certificate(issuer, key, key_id="a/b c", place="p", not_after=late))
    assert cert.valid_before == int(issuer.cert.not_valid_after_utc.timestamp())
    with pytest.raises(ValueError, match="before now"):
        pki.ssh_certificate(issuer, key, key_id="a/b c", place="p",
                            not_after=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1))


def test_person_access_carries_the_ssh_certificate_for_the_same_key(issuer: pki.Issuer) -> None:
    key = pki.new_key()
    end = dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(hours=1)
    host = LeaseSshHost(name="vhost0", hostName="127.0.0.1", port=20022)
    access = pki.person_access(issuer, "CA", "127.0.0.1:20408", "desk/carol",
                               pki.public_pem(key), end, place="vb-x86-1",
                               key_id=pki.ssh_key_id("team-a", "l1", UID), ssh_hosts=[host],
                               known_hosts="[127.0.0.1]:20022 ssh-ed25519 AAAA\n")
    model = LeaseAccess.model_validate(access)
    assert model.ssh is not None and model.ssh.principal == "place:vb-x86-1"
    assert model.ssh.hosts == [host]
    cert = _parse(model.ssh.certificate)
    assert cert.public_key().public_numbers() == key.public_key().public_numbers()
    assert cert.valid_before == int(end.timestamp()) and model.expiresAt == f"{end:%Y-%m-%dT%H:%M:%SZ}"
    # no place (nothing granted yet): the coordinator's certificate only
    assert "ssh" not in pki.person_access(issuer, "CA", "c:1", "desk/carol", pki.public_pem(key),
                                          end)


def test_key_ids_and_principals_read_back() -> None:
    assert pki.ssh_lease_uid(pki.ssh_key_id("team-a", "l1", UID)) == UID
    for not_ours in ("", "team-a/l1", "nobody", "a b c", f"a/b/c {UID}"):
        assert pki.ssh_lease_uid(not_ours) is None
    assert pki.ssh_place(pki.ssh_principal("vb-x86-1")) == "vb-x86-1"
    for not_a_place in ("root", "place:", "xplace:vb-x86-1", "vb-x86-1"):
        assert pki.ssh_place(not_a_place) is None


def test_a_places_forwards_are_its_console_and_power_as_published() -> None:
    assert sshauth.forwards(X86_1) == [("127.0.0.1", 21081), ("127.0.0.1", 21101)]
    assert sshauth.forwards({"PDUDaemonPort": {"host": "10.0.0.5:21090", "pdu": "x", "index": 1},
                             "NetworkSerialPort": {"host": "10.0.0.5", "port": None}}) == [
        ("10.0.0.5", 21090)]          # a ser2net console not served yet: no port to open
    assert sshauth.forwards({"PDUDaemonPort": {"host": "pdu", "pdu": "x", "index": 1},
                             "NetworkPowerPort": {"host": "https://plug/on", "model": "rest"}}) == [
        ("plug", 443), ("pdu", sshauth.PDUDAEMON_PORT)]
    assert sshauth.forwards({"RemoteTFTPProvider": {"host": "127.0.0.1"},
                             "NetworkService": {"address": "10.0.0.9", "port": 22}}) == []


def test_the_principals_line_opens_the_places_ports_and_nothing_else() -> None:
    line = sshauth.principals_line("vb-x86-1", [("127.0.0.1", 21101), ("::1", 21081)])
    assert line == ('restrict,port-forwarding,permitlisten="localhost:1",command="/bin/cat",'
                    'permitopen="127.0.0.1:21101",permitopen="[::1]:21081" place:vb-x86-1')
    with pytest.raises(ValueError):     # no permitopen at all would open everything
        sshauth.principals_line("vb-x86-1", [])


def test_a_certificate_counts_only_while_its_place_is_held_for_its_lease() -> None:
    holder = "/".join(lease_identity(UID))
    key_id = pki.ssh_key_id("team-a", "l1", UID)
    ours = sshauth.principals_line("vb-x86-1", sshauth.forwards(X86_1))
    acquired = {"vb-x86-1": (holder, X86_1), "vb-x86-0": (None, X86_1)}
    assert sshauth.lease_lines(key_id, ["place:vb-x86-1"], acquired) == [ours]
    # another place named in the certificate, a place no one holds, one another lease holds
    other = "/".join(lease_identity("another-uid"))
    assert sshauth.lease_lines(key_id, ["place:vb-x86-0"], acquired) == []
    assert sshauth.lease_lines(key_id, ["place:vb-x86-1"], {"vb-x86-1": (other, X86_1)}) == []
    assert sshauth.lease_lines(key_id, ["place:vb-x86-1"], {"vb-x86-1": (None, X86_1)}) == []
    # a key id that is not a lease's, a principal that is not a place's, a place gone
    assert sshauth.lease_lines("root", ["place:vb-x86-1"], acquired) == []
    assert sshauth.lease_lines(key_id, ["root", "vb-x86-1"], acquired) == []
    assert sshauth.lease_lines(key_id, ["place:vb-gone"], acquired) == []
    # a place with nothing to forward to gets no line (no permitopen would open everything)
    assert sshauth.lease_lines(key_id, ["place:vb-x86-1"],
                               {"vb-x86-1": (holder, {"SigrokDevice": {"driver": "demo"}})}) == []


def test_a_login_is_watched_until_its_place_is_no_longer_held_for_its_lease() -> None:
    from benchfarm.api.places import PlaceInfo
    holder = "/".join(lease_identity(UID))
    now = {"vb-x86-1": PlaceInfo("vb-x86-1", acquired=holder),
           "vb-x86-0": PlaceInfo("vb-x86-0", acquired="/".join(lease_identity("other")))}
    assert sshauth.held(UID, ["vb-x86-1"], now)
    assert not sshauth.held(UID, ["vb-x86-0"], now)
    assert not sshauth.held(UID, ["vb-x86-1"], {"vb-x86-1": PlaceInfo("vb-x86-1")})
    assert not sshauth.held(UID, ["vb-gone"], now)


def test_the_principals_command_refuses_what_is_no_certificate(capsys: pytest.CaptureFixture[str]
                                                                ) -> None:
    key = pki.ssh_public(pki.new_key().public_key()).split()
    assert sshauth.main(key[:2]) == 1 and capsys.readouterr().out == ""
    assert sshauth.main(["only-one"]) == 2


def test_the_exporter_hosts_are_read_from_the_labs_ssh_config_by_ssh(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("[127.0.0.1]:20022 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE\n")
    config = tmp_path / "config"
    config.write_text("".join(
        f"Host {h}\n  HostName 127.0.0.1\n  Port 20022\n  User root\n  IdentityFile /lab/key\n"
        f"  UserKnownHostsFile {known}\n" for h in ("vhost0", "vhost1")) + "Host *.x !y\n  Port 1\n")
    assert _names(config.read_text()) == ["vhost0", "vhost1"]
    hosts, known_text = exporter_hosts(str(config))
    assert hosts == [LeaseSshHost(name=h, hostName="127.0.0.1", port=20022, user="root")
                     for h in ("vhost0", "vhost1")]
    assert known_text == known.read_text()        # once, and never the lab's key
    assert exporter_hosts("") == ([], "") and exporter_hosts(str(tmp_path / "none")) == ([], "")


def test_the_lease_shells_ssh_config_takes_the_lease_key_and_certificate_only(tmp_path: Path
                                                                              ) -> None:
    hosts = [LeaseSshHost(name="vhost0", hostName="127.0.0.1", port=20022)]
    text = client_config(hosts, key=tmp_path / "id", certificate=tmp_path / "id-cert.pub",
                         known_hosts=tmp_path / "kh")
    (tmp_path / "ssh_config").write_text(text)
    out = subprocess.run(["ssh", "-G", "-F", str(tmp_path / "ssh_config"), "vhost0"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    for want in ("hostname 127.0.0.1", "port 20022", "user root", f"identityfile {tmp_path}/id",
                 f"certificatefile {tmp_path}/id-cert.pub", "identitiesonly yes",
                 f"userknownhostsfile {tmp_path}/kh", "stricthostkeychecking true",
                 "batchmode yes", "forwardagent no"):
        assert want in out, want


def test_labgrid_client_runs_as_labgrids_own_with_the_ssh_config() -> None:
    assert client_command(["/venv/bin/labgrid-client", "-p", "x", "console"]) == [
        sys.executable, "-m", "benchfarm.lab.labgrid_forward", "--stock-client", "-p", "x",
        "console"]
    assert client_command(["labgrid-client"])[3:] == ["--stock-client"]
    assert client_command(["kubectl", "get"]) == ["kubectl", "get"]
