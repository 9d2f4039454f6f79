"""labgrid as a real lab runs it: the coordinator, one exporter per exporter host of the
inventory, pdudaemon where boards are switched through it, tagged places. The exporters and
pdudaemon run in the lab network (labnet.py), beside the boards' consoles and power switches:
each exporter `--isolated` under its exporter host's name, so labgrid's clients reach every
resource through that host's SSH (sshd.py), and none of it listens on the host. The iperf3 peers
that network suites measure against live in each board's own network namespace (boards.py,
vlab.py), where a board could reach nothing else of the lab.
"""

from __future__ import annotations

import json
import os
import shutil

import yaml

from benchfarm.lab.coordinator import Coordinator
from benchfarm_devlab import labnet
from benchfarm_devlab.boards import board_pdudaemon_port, board_peer_port
from benchfarm_devlab.config import PORTS, STATE, VENV_BIN, LabError, say
from benchfarm_devlab.pki import ensure_labgrid_pki, labgrid_files, labgrid_tls
from benchfarm_devlab.processes import CONTROL_NICE, running_pid, start_process, stop_process

# Where the exporters publish their resources: the exporter host's own loopback (in the lab
# network), which every client reaches through that host's SSH, be it a local session or a pod.
RESOURCE_HOST = "127.0.0.1"


def exporter_config(config: dict, exporter: str, host: str = RESOURCE_HOST) -> dict:
    """labgrid-exporter's YAML for one exporter host: each board's console and power, as the
    inventory says they are wired (a serial server or a tty through ser2net; the PDU's REST
    outlets or pdudaemon), and the sigrok instrument on its rails where it has one; at `host`
    on the exporter host (clients forward to it through its SSH)."""
    groups = {}
    for b in config["boards"]:
        if b["exporter"] != exporter:
            continue
        group: dict = {}
        if b["console"] == "ser2net":   # the exporter runs ser2net for it, like a USB-UART
            # labgrid serves only devices under /dev: the pty itself, which the virtual lab keeps
            # for as long as it runs (a restart of it changes this file and restarts the exporter)
            group["RawSerialPort"] = {"port": os.path.realpath(b["pty_link"]), "speed": 115200}
        else:
            group["NetworkSerialPort"] = {"host": host, "port": b["serial_port"],
                                          "speed": 115200, "protocol": "raw"}
        if b["power"] == "pdudaemon":
            # the board's own pdudaemon, which drives its plug only (start_pdudaemon)
            group["PDUDaemonPort"] = {"host": f"{host}:{board_pdudaemon_port(b['index'])}",
                                      "pdu": plug(b), "index": 1}
        else:       # the board's own power port of the virtual PDU (vlab.py)
            group["NetworkPowerPort"] = {
                "model": "simplerest", "index": b["index"],
                "host": f"http://{host}:{b['power_port']}/outlet/{{index}}/{{value}}"}
        if b.get("tftp_dir"):  # its bootloader's files: staged here by runs over SSH (sshd.py)
            group["TFTPProvider"] = {"internal": b["tftp_dir"] + "/", "external": ""}
        if b.get("sigrok"):  # published as it is: labgrid has no export for a non-USB sigrok
            group["SigrokDevice"] = dict(b["sigrok"])    # device (see benchfarm.lab.rails)
        groups[b["name"]] = group
    return groups


def _published(group: dict) -> set[str]:
    """`<class>/<name>` of what the coordinator lists for an exporter group (a local serial
    device is published as the NetworkSerialPort its ser2net serves)."""
    published = {"RawSerialPort": "NetworkSerialPort", "TFTPProvider": "RemoteTFTPProvider"}
    return {f"{published.get(name, name)}/{name}" for name in group}


def plug(board: dict) -> str:
    """The address of a board's smart plug (its own power port of the virtual PDU): pdudaemon
    names a PDU by the host it talks to."""
    return f"127.0.0.1:{board['power_port']}/tasmota/{board['index']}"


def start_pdudaemon(config: dict) -> None:
    """One pdudaemon per board wired through it, in front of that board's own Tasmota smart plug
    (the virtual PDU's Tasmota dialect on the board's power port), on the board's own port
    (boards.board_pdudaemon_port): what reaches a board's pdudaemon drives that plug and no
    other, as a lease's forward to it must. (One pdudaemon for all plugs would take any plug's
    name in its request.)"""
    boards = [b for b in config["boards"] if b["power"] == "pdudaemon"]
    wanted = {f"pdudaemon-{b['name']}" for b in boards}
    # the lab's one pdudaemon for every plug, before each board had its own; and boards gone
    for pid in sorted((STATE / "pids").glob("pdudaemon*.pid")):
        if pid.stem not in wanted and stop_process(pid.stem):
            say(f"stopped {pid.stem}: each board on pdudaemon has its own")
    if not boards:
        return
    if shutil.which("pdudaemon") is None:
        raise LabError("pdudaemon is not installed (Debian package pdudaemon; `make deps`)")
    for b in boards:
        name, port = f"pdudaemon-{b['name']}", board_pdudaemon_port(b["index"])
        conf = STATE / "pdudaemon" / f"{b['name']}.conf"
        conf.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({
            "daemon": {"hostname": "127.0.0.1", "port": port, "logging_level": "INFO",
                       "listener": "http"},
            "pdus": {plug(b): {"driver": "sonoff_s20_tasmota"}},
        }, indent=2)
        if conf.exists() and conf.read_text() != text and running_pid(name):
            stop_process(name)
        conf.write_text(text)
        argv = [shutil.which("pdudaemon"), "--conf", str(conf),
                "--logfile", str(STATE / "logs" / f"{name}-requests.log")]
        # in the lab network, beside the PDU it drives (labnet.py)
        start_process(name, labnet.inside(argv), ports=[], restart_on_change=True,
                      ready=lambda port=port: labnet.port_open_inside(port))


def start_labgrid(config: dict, inventory: dict) -> None:
    coord_dir = STATE / "coordinator"
    coord_dir.mkdir(parents=True, exist_ok=True)
    ensure_labgrid_pki([exp["name"] for exp in inventory["exporters"]])
    # labgrid's coordinator, saving its state with LibYAML, taking only clients and exporters
    # with a certificate of the lab's labgrid CA (mutual TLS), each as who its certificate
    # says (`benchfarm_devlab.coordinator`)
    start_process("labgrid-coordinator", [
        str(VENV_BIN / "python"), "-m", "benchfarm_devlab.coordinator",
        "--listen", f"127.0.0.1:{PORTS.coordinator}",
    ], cwd=coord_dir, ports=[PORTS.coordinator], ready=coordinator_speaks_tls,
        nice=CONTROL_NICE, env=labgrid_files("coordinator"))
    coordinator = Coordinator(f"127.0.0.1:{PORTS.coordinator}", user="lab-admin", host="benchfarm-lab",
                              tls=labgrid_tls("lab-admin"))
    host = RESOURCE_HOST
    try:
        for exp in inventory["exporters"]:
            name = exp["name"]
            cfg = STATE / "exporters" / f"{name}.yaml"
            cfg.parent.mkdir(parents=True, exist_ok=True)
            groups = exporter_config(config, name, host)
            text = yaml.safe_dump(groups)
            if cfg.exists() and cfg.read_text() != text and running_pid(f"labgrid-exporter-{name}"):
                say(f"labgrid-exporter {name}: its resources changed; restarting it")
                stop_process(f"labgrid-exporter-{name}")
            cfg.write_text(text)
            expected = {f"{name}/{group}/{pub}" for group, res in groups.items()
                        for pub in _published(res)}

            def exporter_ready(name: str = name, expected: set[str] = expected) -> bool:
                try:
                    return expected <= set(coordinator.resources().get(name, []))
                except Exception:
                    return False
            # labgrid's exporter, with this exporter's certificate (`benchfarm_devlab.exporter`),
            # in the lab network as the exporter host `name`, `--isolated`: every resource it
            # publishes says "through `name`'s SSH"; it reaches the coordinator through the lab
            # network's relay (labnet.py)
            start_process(f"labgrid-exporter-{name}", labnet.inside([
                str(VENV_BIN / "python"), "-m", "benchfarm_devlab.exporter",
                "--coordinator", f"127.0.0.1:{PORTS.coordinator}",
                "--name", name, "--hostname", host, "--isolated", str(cfg),
            ]), ports=[], ready=exporter_ready, timeout=60, restart_on_change=True,
                env={**labgrid_files(f"exporter-{name}"), "BENCHFARM_EXPORTER_HOST": name})
        for b in config["boards"]:
            tags = {"device_type": b["device_type"], **{k: str(v) for k, v in b["labels"].items()}}
            if shutil.which("iperf3"):     # its own network peer, in its namespace (boards.board_network)
                tags["iperf3-peer"] = f"10.0.2.2:{board_peer_port(b['index'])}"
            coordinator.ensure_place(b["name"], match=f"{b['exporter']}/{b['name']}/*", tags=tags,
                                     comment=f"virtual board ({b['device_type']})")
    finally:
        coordinator.close()


def coordinator_speaks_tls() -> bool:
    """Is the coordinator up, with TLS that takes the lab admin's certificate? (A coordinator of
    a lab made before it had TLS answers in the clear: not ready, so it is restarted.)"""
    import socket
    import ssl

    from benchfarm.lab.labgrid_forward import client_context
    files = labgrid_files("lab-admin")
    try:
        ctx = client_context(files["BENCHFARM_LABGRID_CA"], files["BENCHFARM_LABGRID_CERT"],
                             files["BENCHFARM_LABGRID_KEY"])
        with socket.create_connection(("127.0.0.1", PORTS.coordinator), timeout=3) as raw, \
                ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            return tls.selected_alpn_protocol() == "h2"
    except (OSError, ssl.SSLError):
        return False


def stop_host_peers() -> None:
    """Labs up before the boards had networks of their own ran the iperf3 peers on the host;
    the boards no longer reach them there (their peers run in their namespaces): stop them."""
    for pid in sorted((STATE / "pids").glob("iperf3*.pid")):
        if stop_process(pid.stem):
            say(f"stopped {pid.stem}: the boards' peers run in their own network namespaces")
