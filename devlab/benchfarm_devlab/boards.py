"""The virtual boards: the inventory, their Debian-built images, QEMU command lines, and the
virtual lab process (exporters/virtual/vlab.py: serial brokers that stay connectable while a
board is off, and the PDU that powers QEMU on and off; exporters/virtual/sensors.py: each
board's stand-in for cpufreq and thermal zones, pushed into the guest over a virtio-serial port,
and `throttle`, its test hook).

The virtual lab runs in the lab network (labnet.py), the exporter hosts' network, where its
consoles and power ports listen. Each board's network is its own: the PDU starts its QEMU in a
network namespace of its own, where slirp's 10.0.2.2 reaches only the board's peers
(`board_network`), never the lab network's consoles and power ports, the lab's services on the
host's loopback or the one-node cluster's bridge address.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import yaml

from benchfarm_devlab import labnet
from benchfarm_devlab.config import DEVICE_TYPES, INVENTORY, PORTS, REPO, STATE, LabError, say
from benchfarm_devlab.processes import running_pid, start_process, stop_process


def load_inventory() -> dict:
    return yaml.safe_load(INVENTORY.read_text())


def device_type(name: str) -> dict:
    return yaml.safe_load((DEVICE_TYPES / f"{name}.yaml").read_text())


def image_profile(dtype: dict) -> str:
    return (dtype.get("virtual") or {}).get("image") or dtype["arch"]


def build_images(profiles: set[str]) -> dict[str, Path]:
    out = {}
    for profile in sorted(profiles):
        res = subprocess.run([sys.executable, str(REPO / "exporters/virtual/build_image.py"),
                              profile], stdout=subprocess.PIPE, text=True)
        if res.returncode != 0:
            raise LabError(f"virtual board image {profile}: build failed (see [image] lines above)")
        out[profile] = Path(res.stdout.strip())
    return out


def tftp_root(board: dict, image: Path) -> Path:
    """The board's TFTP directory on its exporter host (a place's TFTPProvider): the image's
    kernel and initramfs, and what runs stage there (lab.deploy) beside them."""
    root = STATE / "tftp" / board["name"]
    root.mkdir(parents=True, exist_ok=True)
    for name in ("vmlinuz", "initramfs.cpio"):
        link = root / name
        if link.is_symlink() and link.readlink() == image / name:
            continue
        link.unlink(missing_ok=True)
        link.symlink_to(image / name)
    return root


def qemu_argv(board: dict, dtype: dict, image: Path, serial_socket: Path, qmp_socket: Path,
              scratch: Path, tftp: Path | None = None,
              sensors_socket: Path | None = None) -> list[str]:
    virtual = dtype.get("virtual") or {}
    cmdline = f"printk.time=1 panic=-1 benchfarm.board={board['name']}"
    if virtual.get("append"):
        cmdline += " " + virtual["append"]
    memory = board.get("memoryMiB") or virtual.get("memoryMiB") or 1024
    # with a bootloader as firmware, the bootloader loads kernel and initramfs over TFTP (the
    # device type's labgrid environment says how) from QEMU's user network: the board's TFTP
    # directory on its exporter host
    bios = virtual.get("bios")
    boot = ["-bios", bios] if bios else [
        "-kernel", str(image / "vmlinuz"), "-initrd", str(image / "initramfs.cpio")]
    net = ["-netdev", f"user,id=n0{f',tftp={tftp}' if bios else ''}",
           "-device", "virtio-net-pci,netdev=n0,romfile="]
    common = [
        "-accel", "tcg", "-smp", str(board.get("cpus", 2)), "-m", str(memory),
        "-display", "none", "-nodefaults", "-no-user-config", "-no-reboot",
        "-chardev", f"socket,id=s0,path={serial_socket},reconnect=1", "-serial", "chardev:s0",
        "-qmp", f"unix:{qmp_socket},server=on,wait=off", *boot,
        "-drive", f"file={scratch},if=virtio,format=raw,cache=unsafe",
        *[str(a) for a in virtual.get("qemuArgs", [])], *net,
    ]
    if sensors_socket is not None:    # the sensor model's port (vlab.py connects as a client)
        common += ["-device", "virtio-serial-pci",
                   "-chardev", f"socket,id=sensors,path={sensors_socket},server=on,wait=off",
                   "-device", f"virtserialport,chardev=sensors,name={SENSORS_PORT}"]
    x86 = dtype["arch"] == "amd64"
    append = [] if bios else ["-append", f"console={'ttyS0' if x86 else 'ttyAMA0'} {cmdline}"]
    if x86:
        return ["qemu-system-x86_64", "-M", "pc", "-global", "PIIX4_PM.disable_s3=0",
                "-rtc", "base=utc", *common, *append]
    return ["qemu-system-aarch64", "-M", "virt", "-cpu", "cortex-a53", *common, *append]


SENSORS_PORT = "org.benchfarm.sensors"   # the virtio-serial port's name the board's init looks for


def board_peer_port(index: int) -> int:
    """The iperf3 peer of virtual board `index`: each bench has its own network peer, so boards
    measured at once (a campaign's columns) do not find one shared server busy."""
    return PORTS.iperf3 + 1 + index


def board_power_port(index: int) -> int:
    """Virtual board `index`'s own power switch (vlab.py): its outlet, rails, QMP state and
    Tasmota plug, and nothing of another board's."""
    return PORTS.outlet_base + index


def board_pdudaemon_port(index: int) -> int:
    """The pdudaemon of virtual board `index` when it is wired through pdudaemon (places.py):
    one per board, driving only that board's plug."""
    return PORTS.pdudaemon_base + index


def board_network(index: int) -> dict:
    """What a board's network namespace holds (vlab.py starts it with each power-on): the iperf3
    peers its runs measure against, on the ports the suites use — the lab's
    (BENCHFARM_IPERF3_PEER) and the board's own (its place's `iperf3-peer` tag) — both at
    10.0.2.2 as the board sees them. Nothing else answers there."""
    peers = [PORTS.iperf3, board_peer_port(index)] if shutil.which("iperf3") else []
    return {"peers": peers}


CONTROL_SOCKET = STATE / "vlab" / "control.sock"


class _UnixHTTPConnection(http.client.HTTPConnection):
    """http.client's connection to a UNIX socket instead of a TCP port."""

    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("vlab", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(str(self.path))
        except OSError:
            sock.close()
            raise
        self.sock = sock


def vlab_request(path: str, timeout: float = 30) -> str:
    """GET `path` (`/fault/<i>/panic`, `/outlet/<i>/`, `/rails/<i>` ...) from the virtual lab's
    control endpoint, its HTTP on the UNIX socket `STATE/vlab/control.sock` (mode 0600): the
    lab's own way to its PDU and test hooks, which no board's power port serves and no lease's
    SSH forward reaches. Its body; LabError when it is not there or answers other than 200."""
    conn = _UnixHTTPConnection(CONTROL_SOCKET, timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read().decode(errors="replace")
    except OSError as exc:
        raise LabError(f"virtual lab control socket {CONTROL_SOCKET}: {exc} (is the lab up?)") \
            from exc
    finally:
        conn.close()
    if resp.status != 200:
        raise LabError(f"virtual lab: GET {path} answered {resp.status}: {body.strip()}")
    return body


def _board_index(board: int | str) -> int:
    """A virtual board's outlet index, from its index or its name (the running lab's config)."""
    if isinstance(board, int):
        return board
    config = json.loads((STATE / "vlab" / "vlab.json").read_text())
    for b in config["boards"]:
        if b["name"] == board:
            return int(b["index"])
    raise LabError(f"virtual lab: no board {board!r}")


def board_sensors(board: int | str) -> dict:
    """A virtual board's sensor model (exporters/virtual/sensors.py) as the lab holds it:
    tempC, curKHz, minKHz, maxKHz, throttled, coolingTransitions, ..., and `tree`, the files
    its guest has under /run/benchfarm/sys."""
    return json.loads(vlab_request(f"/sensors/{_board_index(board)}"))


def throttle(board: int | str, seconds: float, khz: int) -> dict:
    """Throttle a virtual board for `seconds` at `khz` from now (its cpufreq reads `khz`, its
    cooling device counts the change, its QEMU runs khz/max of the time); 0 seconds ends a
    throttle. The sensor model's state after the change."""
    return json.loads(vlab_request(
        f"/sensors/{_board_index(board)}/throttle?seconds={seconds:g}&khz={int(khz)}"))


def _control_ready() -> bool:
    try:
        vlab_request("/outlet/0/", timeout=2)
    except LabError:
        return False
    return True


def start_virtual_lab(inventory: dict) -> dict:
    boards = inventory["boards"]
    dtypes = {b["deviceType"]: device_type(b["deviceType"]) for b in boards}
    images = build_images({image_profile(d) for d in dtypes.values()})
    rundir = STATE / "vlab"
    rundir.mkdir(parents=True, exist_ok=True)
    config_boards = []
    for index, board in enumerate(boards):
        dtype = dtypes[board["deviceType"]]
        bdir = STATE / "boards" / board["name"]
        bdir.mkdir(parents=True, exist_ok=True)
        scratch = bdir / "scratch.img"
        if not scratch.exists():
            with scratch.open("wb") as f:
                f.truncate(256 * 1024 * 1024)
        serial_socket, qmp_socket = bdir / "serial.sock", bdir / "qmp.sock"
        sensors_socket = bdir / "sensors.sock"
        console = board.get("console", "tcp")     # tcp: a serial server; ser2net: a tty device
        image = images[image_profile(dtype)]
        tftp = tftp_root(board, image) if (dtype.get("virtual") or {}).get("bios") else None
        config_boards.append({
            "name": board["name"], "index": index, "exporter": board["exporter"],
            "device_type": board["deviceType"], "labels": board.get("labels", {}),
            "cpus": board.get("cpus", 2), "rails": dtype.get("rails", []),
            "console": console, "power": board.get("power", "simplerest"),
            "power_port": board_power_port(index),
            "sigrok": board.get("sigrok"),
            **({"pty_link": str(bdir / "ttyBF0")} if console == "ser2net" else
               {"serial_port": PORTS.serial_base + index}),
            "serial_socket": str(serial_socket), "qmp_socket": str(qmp_socket),
            **({"tftp_dir": str(tftp)} if tftp else {}),
            "qemu_argv": qemu_argv(board, dtype, image, serial_socket, qmp_socket, scratch, tftp,
                                   sensors_socket),
            "sensors": {"socket": str(sensors_socket),
                        "maxKHz": int((dtype.get("cpuClockMHz") or 1000) * 1000)},
            "network": board_network(index),
        })
    code = b"".join((REPO / "exporters/virtual" / f).read_bytes() for f in ("vlab.py", "sensors.py"))
    config = {"logdir": str(STATE / "logs"), "boards": config_boards,
              "control_socket": str(CONTROL_SOCKET),
              "code": hashlib.sha256(code).hexdigest()[:16]}
    cfg_path = rundir / "vlab.json"
    changed = not cfg_path.exists() or json.loads(cfg_path.read_text()) != config
    if changed and running_pid("vlab"):
        say("virtual lab: inventory, images or code changed; restarting it")
        stop_process("vlab")
    cfg_path.write_text(json.dumps(config, indent=2))
    # in the lab network (labnet.py): its consoles and power ports are on that network's
    # loopback, reached only through the exporter hosts' SSH; its control socket from here
    labnet.ensure()
    start_process("vlab", labnet.inside([sys.executable, str(REPO / "exporters/virtual/vlab.py"),
                                         str(cfg_path)]),
                  ports=[], restart_on_change=True,
                  ready=_control_ready)
    config["images"] = {k: str(v) for k, v in images.items()}
    return config
