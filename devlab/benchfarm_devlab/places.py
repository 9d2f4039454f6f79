"""labgrid as a real lab runs it: the coordinator, one exporter per exporter host of the
inventory (serial over TCP, power through the virtual PDU's REST outlets), tagged places; and the
iperf3 peer that network suites measure against.
"""

from __future__ import annotations

import shutil

import yaml

from benchfarm.lab.coordinator import Coordinator

from .config import PORTS, STATE, VENV_BIN, say
from .processes import port_open, start_process


def exporter_config(config: dict, exporter: str) -> dict:
    groups = {}
    for b in config["boards"]:
        if b["exporter"] != exporter:
            continue
        groups[b["name"]] = {
            "NetworkSerialPort": {"host": "127.0.0.1", "port": b["serial_port"], "speed": 115200,
                                  "protocol": "raw"},
            "NetworkPowerPort": {"model": "simplerest", "index": b["index"],
                                 "host": f"http://127.0.0.1:{PORTS.pdu}/outlet/{{index}}/{{value}}"},
        }
    return groups


def start_labgrid(config: dict, inventory: dict) -> None:
    coord_dir = STATE / "coordinator"
    coord_dir.mkdir(parents=True, exist_ok=True)
    start_process("labgrid-coordinator", [
        str(VENV_BIN / "labgrid-coordinator"), "--listen", f"127.0.0.1:{PORTS.coordinator}",
    ], cwd=coord_dir, ports=[PORTS.coordinator], ready=lambda: port_open(PORTS.coordinator))
    coordinator = Coordinator(f"127.0.0.1:{PORTS.coordinator}", user="lab-admin", host="benchfarm-lab")
    try:
        for exp in inventory["exporters"]:
            name = exp["name"]
            cfg = STATE / "exporters" / f"{name}.yaml"
            cfg.parent.mkdir(parents=True, exist_ok=True)
            cfg.write_text(yaml.safe_dump(exporter_config(config, name)))
            expected = {f"{name}/{b['name']}/{cls}/{cls}" for b in config["boards"]
                        if b["exporter"] == name for cls in ("NetworkSerialPort", "NetworkPowerPort")}

            def exporter_ready(name: str = name, expected: set[str] = expected) -> bool:
                try:
                    return expected <= set(coordinator.resources().get(name, []))
                except Exception:
                    return False
            start_process(f"labgrid-exporter-{name}", [
                str(VENV_BIN / "labgrid-exporter"), "--coordinator", f"127.0.0.1:{PORTS.coordinator}",
                "--name", name, "--hostname", "127.0.0.1", str(cfg),
            ], ports=[], ready=exporter_ready, timeout=60)
        for b in config["boards"]:
            tags = {"device_type": b["device_type"], **{k: str(v) for k, v in b["labels"].items()}}
            coordinator.ensure_place(b["name"], match=f"{b['exporter']}/{b['name']}/*", tags=tags,
                                     comment=f"virtual board ({b['device_type']})")
    finally:
        coordinator.close()


def start_iperf3() -> None:
    if shutil.which("iperf3") is None:
        say("iperf3 not installed on the host; network suites will have no peer")
        return
    start_process("iperf3", ["iperf3", "-s", "-p", str(PORTS.iperf3)], ports=[PORTS.iperf3],
                  ready=lambda: port_open(PORTS.iperf3))
