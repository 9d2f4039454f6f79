"""Issue 11 on the real stack: a board wired like a bench (ser2net console, pdudaemon power).

vb-bench-0's console is a tty device (a pty with a stable path) that labgrid-exporter serves
through ser2net, the way every USB-UART of a real lab is exported; its power is a Tasmota plug
driven by a real pdudaemon, which labgrid's PDUDaemonDriver talks to. Nothing in benchfarm knows
either: the place carries the resources, labgrid binds the drivers.
"""

from __future__ import annotations

import os
import subprocess
import urllib.error
import urllib.request

import pytest

import benchfarm_devlab as devlab
from benchfarm.lab.coordinator import Coordinator
from benchfarm.settings import Settings
from benchfarm_devlab import labnet
from tests.stack.conftest import apply, wait_for
from tests.stack.runs import board_index, cond, finished, outlet_on, run_yaml, unique
from tests.stack.test_operator import custom  # noqa: F401

pytestmark = pytest.mark.stack

PLACE = "vb-bench-0"


def test_the_bench_place_is_a_ser2net_console_and_a_pdudaemon_port(lab):
    c = Coordinator.from_settings(Settings.from_env(), user="pytest", host="wiring")
    try:
        wait_for(f"{PLACE} free", lambda: not c.places()[PLACE].acquired, timeout=300)
        assert c.places()[PLACE].resources["NetworkSerialPort"]["port"] is None  # not served yet
        c.acquire(PLACE)       # the exporter starts ser2net for the holder; acquire waits for it
        try:
            resources = c.places()[PLACE].resources
            ser2net = subprocess.run(["pgrep", "-af", "ser2net"], capture_output=True,
                                     text=True).stdout
        finally:
            c.release(PLACE)
    finally:
        c.close()
    assert set(resources) == {"NetworkSerialPort", "PDUDaemonPort"}, resources
    port = resources["NetworkSerialPort"]["port"]
    tty = os.path.realpath(devlab.STATE / "boards" / PLACE / "ttyBF0")   # the pty under /dev/pts
    assert port and tty in ser2net and str(port) in ser2net, (resources, ser2net)
    # the board's own pdudaemon, in front of its own plug on its own power port
    index = board_index(PLACE)
    assert resources["PDUDaemonPort"]["host"] == f"127.0.0.1:{devlab.PORTS.pdudaemon_base + index}"
    assert resources["PDUDaemonPort"]["pdu"] == \
        f"127.0.0.1:{devlab.PORTS.outlet_base + index}/tasmota/{index}"


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_each_boards_power_switch_and_pdudaemon_drive_that_board_only(lab):
    """From the exporter hosts' network (where a lease's SSH forward lands), every place's power
    switch as the coordinator publishes it answers for its own board and refuses another
    board's outlet and the lab's test hooks; the bench board's pdudaemon refuses any plug but
    its own (and drives its own: the run below)."""
    c = Coordinator.from_settings(Settings.from_env(), user="pytest", host="wiring")
    try:
        places = {name: p.resources for name, p in c.places().items()}
    finally:
        c.close()
    switches = {name: r["NetworkPowerPort"] for name, r in places.items()
                if "NetworkPowerPort" in r}
    daemon = places[PLACE]["PDUDaemonPort"]
    other = next(iter(switches.values()))

    def probe() -> dict[str, tuple[int, str]]:
        out = {}
        for name, port in switches.items():
            own, there = int(port["index"]), port["host"].split("/outlet/")[0]
            out[f"{name} own"] = _get(f"{there}/outlet/{own}/")
            out[f"{name} other"] = _get(f"{there}/outlet/{(own + 1) % len(places)}/")
            out[f"{name} hook"] = _get(f"{there}/fault/{own}/none")
        plug = f"127.0.0.1:{other['host'].split('/')[2].split(':')[1]}/tasmota/{other['index']}"
        out["pdudaemon other plug"] = _get(f"http://{daemon['host']}/power/control/on?"
                                           f"hostname={plug}&port=1")
        return out

    got = labnet.run_inside(probe)
    assert len({p["host"] for p in switches.values()}) == len(switches), switches  # one each
    for name in switches:
        assert got[f"{name} own"][0] == 200 and got[f"{name} own"][1] in ("0", "1"), got
        assert got[f"{name} other"][0] == 404 and got[f"{name} hook"][0] == 404, got
    assert got["pdudaemon other plug"] == (500, "Invalid request\n"), got


def test_a_run_on_the_bench_board_succeeds_through_ser2net_and_pdudaemon(custom):  # noqa: F811
    log = devlab.STATE / "logs" / f"pdudaemon-{PLACE}-requests.log"
    before = log.stat().st_size if log.exists() else 0
    name = unique("bench")
    apply(run_yaml(name, plan="demo", selector={"board": PLACE}, bootCycles=2))
    st = finished(custom, name, timeout=300)
    assert cond(st)["status"] == "True", st
    assert st["board"] == PLACE and st["results"]["boot"]["n"] == 2
    assert "x86_64" in st["provenance"]["uname"]
    # pdudaemon did the switching: its log has the plug's on and off jobs, none failed
    jobs = log.read_text(errors="replace")[before:]
    assert "tasmota" in jobs and "(on 1)" in jobs and "(off 1)" in jobs, jobs[-2000:]
    assert "Failed" not in jobs, jobs[-2000:]
    wait_for("the board off after the run", lambda: not outlet_on(PLACE), timeout=30)
