"""The board network on the real stack: each virtual board's QEMU runs in a network namespace of
its own (only its iperf3 peers there, gone with it), and `benchfarm check --boards` audits it from
the boards: nothing on the embedded lab, every endpoint a board reaches once isolation is off.

Run only the board tests of this file (the audit of every idle board takes a minute or two).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

import benchfarm_devlab as devlab
from benchfarm.lab.coordinator import Coordinator
from benchfarm.settings import Settings
from tests.conftest import FULL
from tests.stack.conftest import lab, wait_for  # noqa: F401 (fixtures)

pytestmark = pytest.mark.stack


def _vlab_board(name: str) -> dict:
    config = json.loads((devlab.STATE / "vlab" / "vlab.json").read_text())
    return next(b for b in config["boards"] if b["name"] == name)


def _pdu(path: str) -> str:
    return devlab.vlab_request(path)


def _qemu_pid(name: str) -> int | None:
    sock = str(devlab.STATE / "boards" / name / "serial.sock").encode()
    pids = devlab.processes.pids_where(
        lambda argv: argv[0].startswith(b"qemu-system") and any(sock in a for a in argv))
    return pids[0] if pids else None


def _netns(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def _in_netns(ns: str) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/net") == ns:
                    out.append(int(entry))
            except OSError:
                continue
    return out


def _check(*args: str, timeout: float = 900) -> tuple[int, str, float]:
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "benchfarm.cli", "check", "--boards", *args],
                         capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, **devlab.lab_env()})
    print(res.stdout, res.stderr)
    return res.returncode, res.stdout + res.stderr, time.monotonic() - t0


class Held:
    """The place held by this test (nobody else boots it meanwhile)."""

    def __init__(self, place: str) -> None:
        self.place = place
        self.c = Coordinator.from_settings(Settings.from_env(), user="boardnet", host="stacktest")

    def __enter__(self) -> Held:
        wait_for(f"{self.place} free", lambda: self.c.places()[self.place].free, timeout=300)
        self.c.acquire(self.place)
        return self

    def __exit__(self, *exc: object) -> None:
        self.c.release(self.place)
        self.c.close()


def test_a_boards_qemu_runs_in_a_namespace_of_its_own_with_only_its_peers(lab):  # noqa: F811
    """Powered on, vb-x86-1's QEMU is the PDU's process itself (its real PID), in a network
    namespace whose only interface is its loopback, with no route anywhere (so neither the
    host's services nor the one-node cluster's bridge address, config.HOST_ADDR, is reachable
    from it), where only its iperf3 peers listen. Powered off, nothing of it is left."""
    board = _vlab_board("vb-x86-1")
    assert board["network"]["peers"], board   # iperf3 is a lab dependency (make deps)
    with Held("vb-x86-1"):
        _pdu(f"/outlet/{board['index']}/1")
        try:
            pid = wait_for("vb-x86-1's QEMU", lambda: _qemu_pid("vb-x86-1"), timeout=30)
            ns = _netns(pid)
            assert ns != _netns(os.getpid()), "QEMU shares the host's network namespace"
            lab_net = os.readlink(f"/proc/{devlab.processes.running_pid('vlab')}/ns/net")
            assert ns != lab_net, "QEMU shares the lab network (the other boards' consoles)"
            enter = ["nsenter", "-t", str(pid), "-n"]
            links = subprocess.run([*enter, "ip", "-o", "link"], capture_output=True, text=True,
                                   check=True).stdout.splitlines()
            routes = subprocess.run([*enter, "ip", "route", "show", "table", "all"],
                                    capture_output=True, text=True, check=True).stdout
            assert [line.split(":")[1].strip() for line in links] == ["lo"], links
            assert routes and all("dev lo" in r for r in routes.splitlines()), routes

            def listening() -> set[int]:
                out = subprocess.run([*enter, "ss", "-Hltn"], capture_output=True, text=True,
                                     check=True).stdout
                return {int(line.split()[3].rsplit(":", 1)[1]) for line in out.splitlines()}
            wait_for("the peers listening", lambda: listening() >= set(board["network"]["peers"]),
                     timeout=10)
            assert listening() == set(board["network"]["peers"])
            members = _in_netns(ns)
            assert len(members) == 1 + len(board["network"]["peers"]), members
        finally:
            _pdu(f"/outlet/{board['index']}/0")
        assert _qemu_pid("vb-x86-1") is None
        time.sleep(0.5)
        left = [p for p in members if os.path.exists(f"/proc/{p}") and
                not open(f"/proc/{p}/stat").read().split(") ")[1].startswith("Z")]
        assert left == [], f"processes of the board's namespace left after power-off: {left}"


def test_check_boards_finds_nothing_on_the_embedded_lab(lab):  # noqa: F811
    """Every idle board of the embedded lab (x86, the arm64 board booting through U-Boot and
    TFTP, the bench and sigrok boards) tries every control endpoint: none answers. `make test`
    audits one board of each network (QEMU's user network on x86, the arm64 board's through
    U-Boot and TFTP); the full variant (BENCHFARM_FULL=1) every idle board."""
    named = [] if FULL else ["vb-x86-0", "vb-a53-0"]
    code, out, seconds = _check(*named)
    assert code == 0, out
    assert "FINDINGS" not in out and "NOT AUDITED" not in out
    audited = [line for line in out.splitlines() if "nothing reached of" in line]
    assert len(audited) >= (4 if FULL else 2), out
    assert any("vb-a53-0" in line for line in audited), out
    tried = int(out.split(" connections tried")[0].rsplit(",", 1)[1])
    assert tried >= 15, out          # the lab's services, every console and power switch
    print(f"audit of {len(audited)} boards: {seconds:.1f} s")
    # the operator (when it runs) knew the audit's locks for benchfarm's own: no DirectLock
    if devlab.running_pid("benchfarm-operator"):
        from kubernetes import client, config
        config.load_kube_config(config_file=devlab.lab_env()["KUBECONFIG"])
        events = client.CoreV1Api().list_event_for_all_namespaces().items
        direct = [e.message for e in events if e.reason == "DirectLock" and
                  "netcheck" in (e.message or "")]
        assert direct == [], direct


def test_with_isolation_off_check_boards_reports_every_endpoint_it_reached(lab):  # noqa: F811
    """vb-x86-0 booted on its exporter host's network on purpose (the PDU's test hook: its QEMU
    shares the lab network, labnet.py): the audit reports every control endpoint listening
    there — through the board's gateway, 10.0.2.2 — and exits 1; the host's services are not
    among them (the lab network reaches only the coordinator, through its relay); with
    isolation back, the same board reports nothing."""
    index = _vlab_board("vb-x86-0")["index"]
    assert _pdu(f"/network/{index}/open") == "open"
    try:
        code, out, _ = _check("vb-x86-0")
    finally:
        assert _pdu(f"/network/{index}/isolated") == "isolated"
    assert code == 1, out
    rows = [line.split() for line in out.split("FINDINGS")[1].splitlines()
            if line.startswith("vb-x86-0")]
    reached = {r[1] for r in rows}
    assert all(r[2].startswith("10.0.2.2:") for r in rows), rows
    env = devlab.lab_env()
    expected = {
        env["LG_COORDINATOR"]: "labgrid coordinator",
        f"127.0.0.1:{devlab.PORTS.outlet_base + index}": "power switch of vb-x86-0",
        f"127.0.0.1:{devlab.PORTS.outlet_base + 1}": "power switch of vb-x86-1",
        f"127.0.0.1:{devlab.PORTS.serial_base + 1}": "console of vb-x86-1",
        f"127.0.0.1:{devlab.PORTS.pdudaemon_base + _vlab_board('vb-bench-0')['index']}":
            "pdudaemon of vb-bench-0",
        f"127.0.0.1:{devlab.PORTS.sshd}": "SSH of exporter host",
    }
    for endpoint, what in expected.items():
        assert endpoint in reached, (endpoint, what, out)
        assert any(what in " ".join(r) for r in rows if r[1] == endpoint), (endpoint, what)
    # the host's own services are not on the lab network
    for host_only in (devlab.PORTS.apiserver, devlab.PORTS.minio, devlab.PORTS.postgres,
                      devlab.PORTS.web, devlab.PORTS.operator_liveness):
        assert f"127.0.0.1:{host_only}" not in reached, (host_only, out)
    code, out, _ = _check("vb-x86-0")
    assert code == 0 and "vb-x86-0: nothing reached" in out, out


def test_check_boards_says_the_lab_is_unreachable_without_a_traceback(lab):  # noqa: F811
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    res = subprocess.run([sys.executable, "-m", "benchfarm.cli", "check", "--boards"],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, **devlab.lab_env(), "LG_COORDINATOR":
                              f"127.0.0.1:{port}"})
    assert res.returncode == 2, res
    assert "lab unreachable" in res.stderr and "Traceback" not in res.stderr + res.stdout, res


def test_the_peers_never_outlive_a_qemu_that_dies_at_once():
    """vlab.py's own launch and end of a board's process group, with a "QEMU" that exits at
    once (`true`, as a QEMU refusing its arguments would): its peers, which may not have set
    their parent-death signal yet, are gone all the same once the PDU saw it end."""
    import asyncio
    import importlib.util
    spec = importlib.util.spec_from_file_location("vlab", devlab.REPO / "exporters/virtual/vlab.py")
    vlab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vlab)
    ports = [devlab.PORTS.iperf3 + 90, devlab.PORTS.iperf3 + 91]

    async def launch() -> None:
        procs = [await asyncio.create_subprocess_exec(*vlab.isolated_argv(["true"], ports),
                                                      start_new_session=True) for _ in range(10)]
        await asyncio.gather(*(vlab.end_group(p) for p in procs))
    asyncio.run(launch())
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", f"^iperf3 -s -p ({ports[0]}|{ports[1]})$"],
                          capture_output=True, text=True).stdout.split()
    assert left == [], f"peers left behind: {left}"
