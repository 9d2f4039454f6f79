"""A lab of many simulated boards beside the embedded lab, for the scale benchmark and its test.

`up(n)` starts exporters/simulated/simboards.py (n boards: serial TCP ports and a simplerest PDU),
a labgrid-exporter `simhost` that exports them as the real exporter exports any serial server and
PDU outlet, and n places `sim-NNNN` tagged `device_type: sim-board` plus the caller's tags; then it
restarts the lab's operator with a device-type directory that also knows `sim-board` and with a
session limit (the host runs each session as a process). `down()` removes the places, their Board
objects and both processes, and gives the lab back its usual operator.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from benchfarm.lab.coordinator import Coordinator
from benchfarm_devlab.config import DEVICE_TYPES, PORTS, REPO, STATE, VENV_BIN, LabError, say
from benchfarm_devlab.env import kubectl, lab_env, operator_env
from benchfarm_devlab.pki import ensure_labgrid_pki, labgrid_files, labgrid_tls
from benchfarm_devlab.processes import (
    FIRST_NICE,
    OPERATOR_FIRST,
    http_ok,
    port_open,
    running_pid,
    start_process,
    stop_process,
)

SIM = REPO / "exporters" / "simulated"
DIR = STATE / "scale"
EVENTS = DIR / "power-events.jsonl"
EXPORTER = "simhost"
MAX_BOARDS = 1000


def place_name(i: int) -> str:
    return f"sim-{i:04d}"


def _coordinator() -> Coordinator:
    return Coordinator(f"127.0.0.1:{PORTS.coordinator}", user="lab-admin", host="benchfarm-lab",
                       tls=labgrid_tls("lab-admin"))


def up(boards: int, tags: Callable[[int], dict[str, str]] = lambda i: {},
       boot_seconds: float = 2.0) -> dict[str, float]:
    """Start the simulated boards, export them and create their places; seconds per phase."""
    if not 0 < boards <= MAX_BOARDS:
        raise LabError(f"scale lab: 1..{MAX_BOARDS} boards (ports {PORTS.sim_serial_base}..)")
    timings = {}
    DIR.mkdir(parents=True, exist_ok=True)
    EVENTS.write_text("")
    config = {"boards": boards, "serial_base": PORTS.sim_serial_base, "pdu_port": PORTS.sim_pdu,
              "events": str(EVENTS), "workdir": str(DIR / "boards"),
              "boot_seconds": boot_seconds}
    (DIR / "simboards.json").write_text(json.dumps(config))
    t = time.monotonic()
    stop_process("simboards")
    start_process("simboards", [sys.executable, str(SIM / "simboards.py"),
                                str(DIR / "simboards.json")],
                  ports=[PORTS.sim_pdu], ready=lambda: port_open(PORTS.sim_pdu))
    timings["simboards_s"] = time.monotonic() - t
    groups = {place_name(i): {
        "NetworkSerialPort": {"host": "127.0.0.1", "port": PORTS.sim_serial_base + i,
                              "speed": 115200, "protocol": "raw"},
        "NetworkPowerPort": {"model": "simplerest", "index": i,
                             "host": f"http://127.0.0.1:{PORTS.sim_pdu}/outlet/{{index}}/{{value}}"},
    } for i in range(boards)}
    cfg = DIR / f"{EXPORTER}.yaml"
    cfg.write_text(yaml.safe_dump(groups))
    coordinator = _coordinator()
    try:
        t = time.monotonic()
        stop_process(f"labgrid-exporter-{EXPORTER}")
        want = 2 * boards

        def exported() -> bool:
            try:
                return len(coordinator.resources().get(EXPORTER, [])) >= want
            except Exception:
                return False
        ensure_labgrid_pki([EXPORTER])
        start_process(f"labgrid-exporter-{EXPORTER}", [
            str(VENV_BIN / "python"), "-m", "benchfarm_devlab.exporter",
            "--coordinator", f"127.0.0.1:{PORTS.coordinator}",
            "--name", EXPORTER, "--hostname", "127.0.0.1", str(cfg),
        ], ports=[], ready=exported, timeout=300, env=labgrid_files(f"exporter-{EXPORTER}"))
        timings["exporter_s"] = time.monotonic() - t
        t = time.monotonic()
        known = coordinator.places()
        for i in range(boards):
            coordinator.ensure_place(place_name(i), match=f"{EXPORTER}/{place_name(i)}/*",
                                     tags={"device_type": "sim-board", **tags(i)},
                                     comment="simulated board (scale benchmark)", known=known)
        timings["places_create_s"] = time.monotonic() - t
        t = time.monotonic()
        n = sum(1 for name in coordinator.places() if name.startswith("sim-"))
        timings["places_read_s"] = time.monotonic() - t
        if n != boards:
            raise LabError(f"scale lab: {n} sim places in the coordinator, expected {boards}")
    finally:
        coordinator.close()
    return timings


def device_types() -> Path:
    """The lab's device types plus sim-board, for the benchmark's operator and its sessions."""
    out = DIR / "device-types"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for f in [*DEVICE_TYPES.glob("*.yaml"), SIM / "sim-board.yaml"]:
        shutil.copy(f, out / f.name)
    return out


def start_operator(max_sessions: int, extra_env: dict[str, str] | None = None) -> int:
    """(Re)start the lab's operator knowing sim-board, with at most `max_sessions` sessions at
    once; returns its PID."""
    stop_process("benchfarm-operator")
    env = {**lab_env(), **operator_env(), "BENCHFARM_DEVICE_TYPES": str(device_types()),
           "BENCHFARM_MAX_SESSIONS": str(max_sessions), **OPERATOR_FIRST, **(extra_env or {})}
    start_process("benchfarm-operator", [str(VENV_BIN / "benchfarm"), "operator"], env=env,
                  nice=FIRST_NICE, ports=[PORTS.operator_liveness, PORTS.operator_metrics], timeout=600,
                  ready=lambda: http_ok(env["BENCHFARM_LIVENESS"]))
    pid = running_pid("benchfarm-operator")
    assert pid is not None
    return pid


def power_events() -> list[dict]:
    return [json.loads(line) for line in EVENTS.read_text().splitlines() if line.strip()]


def down() -> None:
    """Remove the simulated boards' places and Board objects, stop them, restore the operator."""
    from benchfarm_devlab.lab import start_operator as lab_operator
    stop_process("benchfarm-operator")     # first: it would follow each place's removal
    if running_pid("labgrid-coordinator") is not None:
        coordinator = _coordinator()
        try:
            coordinator.delete_places([n for n in coordinator.places() if n.startswith("sim-")])
        finally:
            coordinator.close()
    stop_process(f"labgrid-exporter-{EXPORTER}")
    stop_process("simboards")
    boards = kubectl("get", "boards", "-o", "name", check=False, capture=True).stdout.split()
    sims = [b for b in boards if b.split("/")[-1].startswith("sim-")]
    for i in range(0, len(sims), 200):
        kubectl("delete", "--wait=false", *sims[i:i + 200], check=False, capture=True)
    say(f"scale lab down: {len(sims)} simulated boards removed")
    lab_operator()
