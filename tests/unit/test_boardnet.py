"""The board-network audit's pure part (core.policy.boardnet): which endpoints a lab's configuration and
places name, which connections a board tries for them (loopback at the gateway too), the probe
commands (run here by busybox's own sh and nc, as on a board) and what their output means."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess

import pytest

from benchfarm.core.policy import boardnet as bn

RESOURCES = {
    "NetworkSerialPort": {"host": "127.0.0.1", "port": 21101, "speed": 115200},
    "NetworkPowerPort": {"model": "simplerest", "index": 1,
                         "host": "http://127.0.0.1:21080/outlet/{index}/{value}"},
    "RemoteTFTPProvider": {"host": "127.0.0.1", "internal": "/x/", "external": ""},
}


def test_host_port_reads_every_form_a_lab_writes():
    assert bn.host_port("127.0.0.1:21408") == ("127.0.0.1", 21408)
    assert bn.host_port("http://127.0.0.1:21080/outlet/{index}/{value}") == ("127.0.0.1", 21080)
    assert bn.host_port("https://api.lab.example") == ("api.lab.example", 443)
    assert bn.host_port("postgresql+psycopg://u:p@db:5433/x") == ("db", 5433)
    assert bn.host_port("[::1]:8080") == ("::1", 8080)
    assert bn.host_port("pdu.lab", 80) == ("pdu.lab", 80)
    assert bn.host_port("pdu.lab") is None and bn.host_port("") is None


def test_a_places_console_and_power_are_endpoints_and_its_exporter_host_is_collected():
    eps = bn.place_endpoints("vb-x86-1", RESOURCES)
    assert [(e.host, e.port) for e in eps] == [("127.0.0.1", 21080), ("127.0.0.1", 21101)]
    assert eps[0].what == "power switch of vb-x86-1 (NetworkPowerPort)"
    assert eps[1].what == "console of vb-x86-1 (NetworkSerialPort)"
    # a serial port not served yet (ser2net starts on acquire) has no port: nothing to try
    assert bn.place_endpoints("b", {"NetworkSerialPort": {"host": "h", "port": None}}) == []
    assert bn.place_endpoints("b", {"PDUDaemonPort": {"host": "127.0.0.1:21090", "pdu": "p"}}) \
        == [bn.Endpoint("127.0.0.1", 21090, "pdudaemon of b (PDUDaemonPort)")]
    assert bn.exporter_hosts([RESOURCES, {"X": {"host": "exp2:22"}}]) == {"127.0.0.1", "exp2"}


def test_loopback_endpoints_are_tried_at_the_gateway_too_and_shared_targets_once():
    api = bn.Endpoint("127.0.0.1", 21443, "API server")
    again = bn.Endpoint("localhost", 21443, "API server by name")
    store = bn.Endpoint("minio.lab", 9000, "store")
    unknown = bn.Endpoint("nowhere.invalid", 1, "unresolved")
    v6 = bn.Endpoint("::1", 2, "v6")
    names = {"localhost": ["127.0.0.1"], "minio.lab": ["10.9.0.4"]}
    probes = bn.plan_probes([api, again, store, unknown, v6], lambda n: names.get(n, []))
    assert [(p.address, p.port) for p in probes] == [
        (bn.GATEWAY, 21443), ("127.0.0.1", 21443), ("10.9.0.4", 9000), ("nowhere.invalid", 1)]
    assert probes[0].endpoints == (api, again) and probes[0].shown == "<gateway>:21443"


def test_probe_commands_stay_short_and_cover_every_probe_once():
    probes = [bn.Probe("127.0.0.1", 20000 + i, (bn.Endpoint("127.0.0.1", 20000 + i, "x"),))
              for i in range(60)]
    commands = bn.probe_commands(probes)
    assert len(commands) > 1 and all(len(c) <= bn.COMMAND_LIMIT for c in commands)
    listed = [int(n) for c in commands for n in re.findall(r"\bp (\d+) ", c)]
    assert sorted(listed) == list(range(60))


def test_output_says_which_answered_and_findings_name_the_gateway_address():
    api = bn.Endpoint("127.0.0.1", 21443, "API server")
    pdu = bn.Endpoint("127.0.0.1", 21080, "PDU")
    probes = [bn.Probe(bn.GATEWAY, 21443, (api,)), bn.Probe("127.0.0.1", 21443, (api,)),
              bn.Probe(bn.GATEWAY, 21080, (pdu,))]
    out = ("noise\nbfnet 0 0 10.0.2.2 \nbfnet 1 1 127.0.0.1 nc: can't connect to remote host "
           "(127.0.0.1): Connection refused\r\nbfnet 2 127 10.0.2.2 sh: nc: not found\n")
    results = bn.parse_probe_output(out)
    assert results[0].reached and not results[1].reached
    assert "refused" in results[1].message
    found = bn.findings("vb-x86-0", probes, results)
    assert [f.row() for f in found] == [("vb-x86-0", "127.0.0.1:21443", "10.0.2.2:21443",
                                         "API server")]
    assert bn.unanswered(probes, results) == [probes[2]]
    text = bn.table([f.row() for f in found], ("board", "endpoint", "reached at", "what"))
    assert text.splitlines()[1].split() == ["vb-x86-0", "127.0.0.1:21443", "10.0.2.2:21443",
                                            "API", "server"]


@pytest.mark.skipif(shutil.which("busybox") is None, reason="busybox-static not installed")
def test_the_probe_commands_run_in_busybox_sh_and_find_what_listens(tmp_path):
    """The commands as a board's busybox runs them, against two ports of this host's loopback:
    one listening, one closed. The gateway is set to 127.0.0.1 instead of read from `ip route`
    (busybox sh runs its own `ip`: this host's gateway would be tried), so nothing leaves the
    machine."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for applet in ("sh", "nc", "timeout", "sed", "head", "tr", "true"):
        (bindir / applet).symlink_to(shutil.which("busybox"))
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(8)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))        # bound, never listening: refused
    try:
        up, down = listening.getsockname()[1], closed.getsockname()[1]
        probes = bn.plan_probes([bn.Endpoint("127.0.0.1", up, "open one"),
                                 bn.Endpoint("127.0.0.1", down, "closed one")], lambda n: [])
        output = ""
        for command in bn.probe_commands(probes):
            assert command.startswith(bn.GATEWAY_LOOKUP)
            command = "g=127.0.0.1; " + command[len(bn.GATEWAY_LOOKUP):]
            res = subprocess.run([str(bindir / "sh"), "-c", command], capture_output=True,
                                 text=True, timeout=20, env={"PATH": str(bindir)})
            output += res.stdout
        results = bn.parse_probe_output(output)
        assert len(results) == 4, output
        found = bn.findings("board", probes, results)
        assert sorted(f.tried for f in found) == [f"127.0.0.1:{up}", f"127.0.0.1:{up}"]
        assert {f.endpoint.what for f in found} == {"open one"}
        assert all("refused" in r.message for r in results.values() if not r.reached), output
    finally:
        listening.close()
        closed.close()
