#!/usr/bin/env python3
"""The virtual lab's hardware: one serial broker per board and a virtual PDU.

A real board's USB-UART stays connectable while the board is off and shows the next boot from its
first byte; a real PDU outlet starts and cuts the board. QEMU alone does neither (its serial socket
dies with it), so this process owns, per board, a TCP port for clients and a UNIX socket that QEMU
connects to, and serves an HTTP PDU in the `simplerest` dialect that labgrid's NetworkPowerPort
drives: GET /outlet/<index>/1 powers on (starts a fresh QEMU), /0 powers off (kills the QEMU
process and waits for it), /outlet/<index>/ answers "1" or "0". /rails/<index> serves the
board's rail readings (JSON) from its power model, /qmp/<index> its QMP run state and
SUSPEND/WAKEUP events, and /tasmota/<index>/cm?cmnd=Power1 on speaks the Tasmota smart-plug
dialect that pdudaemon's `sonoff_s20_tasmota` driver drives. Each board also has sensors
(sensors.py: a stand-in for cpufreq, thermal zones and throttling, pushed into the guest through
a virtio-serial port), read on the control socket at /sensors/<index>.

Who reaches what: each board's power is its own TCP port (`power_port` in CONFIG.json), serving
only that board's /outlet/<index>/, /rails/<index>, /qmp/<index> and /tasmota/<index>/cm (anything
else, another board's index included, is 404), as each board of a real lab has its own outlet or
plug. A lease's SSH forward to its board's power reaches that board and nothing else. Every route
of every board, and the test hooks below, are served on the lab's control socket only: HTTP on
the UNIX socket `control_socket` (STATE/vlab/control.sock, mode 0600: the lab's own user),
reached from any network namespace by `benchfarm_devlab.vlab_request`.

The test hooks (control socket only): /fault/<index>/panic makes that board's next boots die in
the kernel (as a bricked board would), panic-once only its next boot (as a board that fails a
boot now and then), /fault/<index>/no-wake makes it never come back from a suspend;
/fault/<index>/none heals it. One-shot chaos for the resilience tests: /chaos/<index>/disconnect
drops every serial client (a USB-UART unplugged and replugged), /chaos/<index>/garbage sends line
noise to them, /chaos/<index>/hang freezes the board (SIGSTOP on its QEMU; the next power-off
kills it). /sensors/<index>/throttle?seconds=S&khz=K runs the board at K kHz for S seconds (its
cpufreq reads K, its cooling device counts, its QEMU really runs only K/max of the time).
/network/<index>/open makes that board's next boots share the network vlab runs in
(isolation off, as a misconfigured lab would be), /network/<index>/isolated puts it back.

The board network: QEMU's user network (slirp) forwards a board's 10.0.2.2 to the loopback of
the network namespace QEMU runs in, which is where the lab's services listen (the power ports,
the consoles, and on the host the coordinator, the API server, the store, the database). So each
QEMU with a `network` section starts in a network namespace of its own (`unshare --net`, and
`--map-root-user` when not root), whose loopback holds only the board's legitimate peers: an
`iperf3 -s` on each port of `network.peers`, tied to QEMU (they are its children, killed by the
kernel when it exits: `setpriv --pdeathsig KILL`; and the PDU kills QEMU's process group at
power-off and whenever QEMU ends on its own: `end_group`). The QEMU process is still the one
the PDU started (the wrapper `exec`s it), so power-off, the chaos hooks and the power model see
the real QEMU PID. TFTP (slirp's `tftp=`), the serial and QMP sockets (UNIX sockets) are
untouched by the namespace.

A real-lab shape: a board with `console: ser2net` has no TCP port here; its console is a pseudo
terminal with a stable path (`pty_link`), the way a USB-UART appears as /dev/ttyUSB0, which
labgrid-exporter exports as a RawSerialPort through ser2net.

Usage: vlab.py CONFIG.json   (written by `benchfarm lab up`)
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import signal
import sys
import time
import tty
import urllib.parse
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:    # its sibling, however it is loaded
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from sensors import BoardSensors, SensorModel, heat_rails  # noqa: E402

log = logging.getLogger("vlab")


class SerialBroker:
    """Bytes from QEMU go to every TCP client (or the pty); bytes from any client go to QEMU."""

    def __init__(self, name: str, tcp_port: int | None, socket_path: Path, console_log: Path,
                 pty_link: Path | None = None) -> None:
        self.name = name
        self.tcp_port = tcp_port
        self.socket_path = socket_path
        self.pty_link = pty_link
        self.pty_master: int | None = None
        self.clients: set[asyncio.StreamWriter] = set()
        self.qemu: asyncio.StreamWriter | None = None
        self.console_log = console_log.open("ab", buffering=0)

    async def start(self) -> None:
        self.socket_path.unlink(missing_ok=True)
        await asyncio.start_unix_server(self._on_qemu, path=str(self.socket_path))
        if self.pty_link is not None:
            self._open_pty()
        else:
            await asyncio.start_server(self._on_client, host="127.0.0.1", port=self.tcp_port)

    def _open_pty(self) -> None:
        """A serial device with a stable path; the slave end stays open here so the line never
        hangs up while nobody (ser2net) has it open, like a UART whose board is off."""
        master, slave = os.openpty()
        tty.setraw(slave)
        os.set_blocking(master, False)
        self.pty_master, self._pty_slave = master, slave
        self.pty_link.unlink(missing_ok=True)
        self.pty_link.symlink_to(os.ttyname(slave))
        asyncio.get_running_loop().add_reader(master, self._on_pty)

    def _on_pty(self) -> None:
        try:
            data = os.read(self.pty_master, 4096)
        except (BlockingIOError, OSError):
            return
        if data and self.qemu is not None:
            self.qemu.write(data)

    def _to_clients(self, data: bytes) -> None:
        if self.pty_master is not None:
            try:
                os.write(self.pty_master, data)
            except (BlockingIOError, OSError):
                pass  # nobody reads the line: a UART drops what no one receives
        for client in list(self.clients):
            try:
                client.write(data)
            except (ConnectionError, RuntimeError):
                self.clients.discard(client)

    async def _on_qemu(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.qemu is not None:
            self.qemu.close()
        self.qemu = writer
        try:
            while data := await reader.read(65536):
                self.console_log.write(data)
                self._to_clients(data)
        except ConnectionError:
            pass
        finally:
            if self.qemu is writer:
                self.qemu = None
            writer.close()

    def disconnect(self) -> int:
        n = len(self.clients)
        for client in list(self.clients):
            client.close()
        self.clients.clear()
        return n

    def garbage(self, size: int = 512) -> None:
        noise = bytes(random.Random(size).randrange(256) for _ in range(size))
        self.console_log.write(noise)
        self._to_clients(noise)

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.clients.add(writer)
        try:
            while data := await reader.read(4096):
                if self.qemu is not None:  # like a UART: input to an unpowered board is lost
                    self.qemu.write(data)
        except ConnectionError:
            pass
        finally:
            self.clients.discard(writer)
            writer.close()


class QmpWatcher:
    """Follows one QEMU's run state over QMP: `query-status` and the SUSPEND/WAKEUP events."""

    def __init__(self, path: Path, freeze_pid: int | None = None) -> None:
        self.path = path
        # fault: the board never comes back from a suspend. QEMU ignores `stop` while the guest
        # is suspended and a `stop` after WAKEUP races the resume (a console read fast enough
        # saw the shell come back first), so the QEMU process itself is frozen (SIGSTOP) the
        # moment the guest is suspended: its RTC alarm never fires, its console stays silent;
        # the next power-off kills it.
        self.freeze_pid = freeze_pid
        self.status = "starting"
        self.frozen = False
        self.events: list[dict] = []
        self.task: asyncio.Task | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._run())

    def stop(self) -> None:
        if self.task:
            self.task.cancel()
        self.status = "off"

    async def _run(self) -> None:
        for _ in range(100):
            try:
                reader, writer = await asyncio.open_unix_connection(str(self.path))
                break
            except OSError:
                await asyncio.sleep(0.05)
        else:
            self.status = "unknown"
            return
        try:
            await reader.readline()  # greeting
            writer.write(b'{"execute": "qmp_capabilities"}\n')
            while True:      # polls the run state every 0.2 s and reads events as they come
                writer.write(b'{"execute": "query-status"}\n')
                await writer.drain()
                deadline = time.monotonic() + 0.2
                while (left := deadline - time.monotonic()) > 0:
                    try:
                        line = await asyncio.wait_for(reader.readline(), left)
                    except TimeoutError:
                        break
                    if not line:
                        self.status = "off"
                        return
                    msg = json.loads(line)
                    if "event" in msg:     # dated by QEMU, not by when this read it
                        stamp = msg.get("timestamp") or {}
                        at = stamp.get("seconds", 0) + stamp.get("microseconds", 0) / 1e6
                        self.events.append({"event": msg["event"], "at": at or time.time()})
                        self.events = self.events[-100:]
                        if msg["event"] == "SUSPEND" and self.freeze_pid is not None:
                            os.kill(self.freeze_pid, signal.SIGSTOP)
                            self.status = "suspended"
                            self.frozen = True
                            log.info("%s: frozen in suspend (fault no-wake)", self.path)
                            return
                    elif isinstance(msg.get("return"), dict) and "status" in msg["return"]:
                        self.status = msg["return"]["status"]
                    elif "error" in msg:
                        log.warning("%s: QMP error: %s", self.path, msg["error"])
        except (ConnectionError, json.JSONDecodeError, OSError):
            self.status = "off"


class PowerModel:
    """Per-rail power of a virtual board, from its device type's `model` figures.

    A rail draws `off` when the board is off, `suspended` while QEMU reports the guest suspended
    (S3), and between `idle` and `active` when running, in proportion to the QEMU process's CPU
    load over the last sample (so s2idle, where the guest idles but QMP says running, reads as
    idle). Readings carry 1 % noise, as a real shunt monitor would.
    """

    def __init__(self, rails: list[dict]) -> None:
        self.rails = rails
        self.last_cpu: tuple[float, float] | None = None
        self.rng = random.Random(7)

    def _cpu_load(self, pid: int | None, cpus: int) -> float:
        if pid is None:
            return 0.0
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return 0.0
        now = time.monotonic()
        prev, self.last_cpu = self.last_cpu, (now, ticks)
        if prev is None or now - prev[0] <= 0:
            return 0.0
        return max(0.0, min(1.0, (ticks - prev[1]) / (now - prev[0]) / max(1, cpus)))

    def read(self, state: str, pid: int | None, cpus: int) -> dict:
        load = self._cpu_load(pid, cpus) if state == "running" else 0.0
        rails = {}
        for rail in self.rails:
            m = rail.get("model", {})
            if state == "off":
                mw = m.get("off", 0.0)
            elif state == "suspended":
                mw = m.get("suspended", 0.0)
            else:
                mw = m.get("idle", 0.0) + (m.get("active", 0.0) - m.get("idle", 0.0)) * load
            mw = max(0.0, mw * (1 + self.rng.uniform(-0.01, 0.01)))
            volts = rail["voltage"] if mw > 0 else 0.0
            rails[rail["name"]] = {"voltage": volts, "power_mW": round(mw, 4),
                                   "current_mA": round(mw / volts, 4) if volts else 0.0}
        return {"state": state, "cpuLoad": round(load, 3), "time": time.time(), "rails": rails}


# In the board's own network namespace: its loopback up, its peers started as children of the
# process that then becomes QEMU (so they die with it), then QEMU itself.
NETNS_SCRIPT = ('ip link set lo up || exit 97; n=$1; shift; while [ "$n" -gt 0 ]; do '
                'setpriv --pdeathsig KILL -- iperf3 -s -p "$1" >/dev/null 2>&1 & '
                'n=$((n - 1)); shift; done; exec "$@"')


def isolated_argv(argv: list[str], peers: list[int]) -> list[str]:
    """`argv` (QEMU's) started in a network namespace of its own holding only `peers`."""
    user = [] if os.geteuid() == 0 else ["--map-root-user"]
    return ["unshare", "--net", *user, "--", "sh", "-c", NETNS_SCRIPT, "boardnet",
            str(len(peers)), *(str(p) for p in peers), *argv]


async def end_group(proc: asyncio.subprocess.Process) -> None:
    """When a QEMU ends (power-off, its own exit, a crash), what it started ends too: its
    process group (the board's peers). Their `--pdeathsig` alone misses a QEMU that dies within
    milliseconds of its start, before they set it. The group's ID stays reserved while a member
    lives, so it cannot name anyone else's processes."""
    await proc.wait()
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class Outlet:
    """One PDU outlet: at most one QEMU per board, killed by its real PID (with its process
    group: the board's network peers)."""

    def __init__(self, board: dict, logdir: Path) -> None:
        self.board = board
        self.proc: asyncio.subprocess.Process | None = None
        self.lock = asyncio.Lock()
        self.logdir = logdir
        self.started_at: float | None = None
        self.fault = "none"   # "panic": the next boots die in the kernel, like a bricked board
        self.qmp: QmpWatcher | None = None
        self.power = PowerModel(board.get("rails", []))
        self.isolated = board.get("network") is not None   # /network/<index>/open: test hook
        self.hung = False     # /chaos/<index>/hang froze it: nothing may wake it but power-off
        sensors = board.get("sensors")
        self.sensors = None if sensors is None else BoardSensors(
            board["name"], SensorModel(sensors["maxKHz"], int(board.get("cpus", 2))),
            PowerModel(heat_rails(board.get("rails", []))), sensors["socket"], self.run_state)

    @property
    def is_on(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def run_state(self) -> tuple[str, int | None]:
        """off, running, suspended or frozen (a test hook stopped QEMU), and QEMU's PID."""
        if not self.is_on:
            return "off", None
        if self.hung or (self.qmp is not None and self.qmp.frozen):
            return "frozen", self.proc.pid
        state = self.qmp.status if self.qmp else "running"
        return ("suspended" if state == "suspended" else "running"), self.proc.pid

    async def on(self) -> None:
        async with self.lock:
            if self.is_on:
                return
            qmp = Path(self.board["qmp_socket"])
            qmp.unlink(missing_ok=True)
            if self.sensors is not None:
                Path(self.sensors.socket_path).unlink(missing_ok=True)
            out = (self.logdir / f"{self.board['name']}-qemu.log").open("ab")
            argv = list(self.board["qemu_argv"])
            if self.fault in ("panic", "panic-once") and "-append" in argv:   # not a bootloader
                i = argv.index("-append") + 1
                argv[i] += " rdinit=/benchfarm-fault-no-init"
                if self.fault == "panic-once":     # a boot that fails once, then boots again
                    self.fault = "none"
            if self.isolated:
                argv = isolated_argv(argv, list(self.board["network"].get("peers", [])))
            self.proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
                start_new_session=True)
            out.close()
            asyncio.create_task(end_group(self.proc))
            self.started_at = time.monotonic()
            self.qmp = QmpWatcher(qmp, freeze_pid=self.proc.pid if self.fault == "no-wake"
                                  else None)
            self.qmp.start()
            self.hung = False
            if self.sensors is not None:
                self.sensors.powered_on()
            log.info("%s: power on (qemu pid %d%s)", self.board["name"], self.proc.pid,
                     "" if self.isolated else ", host network")

    async def off(self) -> None:
        async with self.lock:
            if self.proc is None:
                return
            if self.proc.returncode is None:
                try:    # QEMU leads its process group (start_new_session): its peers go too
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            await self.proc.wait()
            if self.qmp is not None:
                self.qmp.stop()
            if self.sensors is not None:
                self.sensors.powered_off()
            log.info("%s: power off", self.board["name"])
            self.proc = None


# what a board's own power port serves, each for that board's index only
BOARD_ROUTES = ("outlet", "rails", "qmp", "tasmota")


class PDU:
    """The PDU's HTTP: every route on the control socket, a board's own routes on its port."""

    def __init__(self, outlets: list[Outlet]) -> None:
        self.outlets = outlets

    async def serve_board(self, index: int, port: int) -> asyncio.Server:
        """Board `index`'s power port: its outlet, rails, QMP state and plug, nothing of another
        board's and no test hook (a lease that reaches its board's power reaches only this)."""
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._handle(reader, writer, only=index)
        return await asyncio.start_server(handle, host="127.0.0.1", port=port)

    async def serve_control(self, path: Path) -> asyncio.Server:
        """Every route, the test hooks included, on a UNIX socket only the lab's own user opens
        (mode 0600, created so: no moment when it is wider), whatever network namespace the
        caller is in."""
        path.unlink(missing_ok=True)
        umask = os.umask(0o177)
        try:
            return await asyncio.start_unix_server(self._handle, path=str(path))
        finally:
            os.umask(umask)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      only: int | None = None) -> None:
        try:
            request = await reader.readline()
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            parts = request.decode("latin-1").split()
            target = parts[1] if len(parts) > 1 else "/"
            route = [p for p in target.partition("?")[0].split("/") if p]
            if only is not None and (len(route) < 2 or route[0] not in BOARD_ROUTES
                                     or route[1] != str(only)):
                status, body = "404 Not Found", (f"this port serves /outlet/{only}/, /rails/{only}, "
                                                 f"/qmp/{only} and /tasmota/{only}/cm only\n")
            else:
                status, body = await self._route(target)
        except Exception as exc:  # a broken request must not take the PDU down
            status, body = "500 Internal Server Error", f"{exc}\n"
        payload = body.encode()
        writer.write(f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: "
                     f"{len(payload)}\r\nConnection: close\r\n\r\n".encode() + payload)
        await writer.drain()
        writer.close()

    async def _route(self, target: str) -> tuple[str, str]:
        path, _, query = target.partition("?")
        parts = [p for p in path.split("/") if p]
        if len(parts) == 3 and parts[0] == "tasmota" and parts[1].isdigit() and parts[2] == "cm":
            return await self._tasmota(int(parts[1]), urllib.parse.parse_qs(query))
        if len(parts) == 2 and parts[0] in ("rails", "qmp") and parts[1].isdigit():
            if int(parts[1]) >= len(self.outlets):
                return "404 Not Found", f"no outlet {parts[1]}\n"
            outlet = self.outlets[int(parts[1])]
            state = "off"
            if outlet.is_on:
                state = outlet.qmp.status if outlet.qmp else "running"
                state = {"suspended": "suspended", "running": "running"}.get(state, state)
            if parts[0] == "qmp":
                return "200 OK", json.dumps({"status": state,
                                             "events": outlet.qmp.events if outlet.qmp else []})
            pid = outlet.proc.pid if outlet.is_on else None
            reading = outlet.power.read("running" if state not in ("off", "suspended") else state,
                                        pid, int(outlet.board.get("cpus", 2)))
            return "200 OK", json.dumps(reading)
        if len(parts) == 3 and parts[0] == "fault" and parts[1].isdigit():
            # test hook: /fault/<index>/<none|panic> makes the board's next boots fail
            if parts[2] not in ("none", "panic", "panic-once", "no-wake") \
                    or int(parts[1]) >= len(self.outlets):
                return "400 Bad Request", "use /fault/<index>/none|panic|panic-once|no-wake\n"
            self.outlets[int(parts[1])].fault = parts[2]
            return "200 OK", parts[2]
        if len(parts) == 3 and parts[0] == "network" and parts[1].isdigit():
            # test hook: /network/<index>/open boots the board on the host's network from its
            # next power-on (isolation off on purpose); /isolated puts it back
            if parts[2] not in ("open", "isolated") or int(parts[1]) >= len(self.outlets) \
                    or self.outlets[int(parts[1])].board.get("network") is None:
                return "400 Bad Request", "use /network/<index>/open|isolated\n"
            self.outlets[int(parts[1])].isolated = parts[2] == "isolated"
            return "200 OK", parts[2]
        if len(parts) == 3 and parts[0] == "chaos" and parts[1].isdigit():
            if int(parts[1]) >= len(self.outlets):
                return "404 Not Found", f"no outlet {parts[1]}\n"
            outlet = self.outlets[int(parts[1])]
            if parts[2] == "disconnect":
                return "200 OK", f"dropped {outlet.broker.disconnect()} client(s)\n"
            if parts[2] == "garbage":
                outlet.broker.garbage()
                return "200 OK", "sent\n"
            if parts[2] == "hang" and outlet.is_on:
                outlet.hung = True     # before the signal: a throttle's duty cycle stops at once
                os.kill(outlet.proc.pid, signal.SIGSTOP)
                log.info("%s: frozen (chaos)", outlet.board["name"])
                return "200 OK", "frozen\n"
            return "400 Bad Request", "use /chaos/<index>/disconnect|garbage|hang (hang: when on)\n"
        if len(parts) in (2, 3) and parts[0] == "sensors" and parts[1].isdigit():
            return self._sensors(parts, urllib.parse.parse_qs(query))
        if len(parts) < 2 or parts[0] != "outlet" or not parts[1].isdigit():
            return "404 Not Found", "use /outlet/<index>/[0|1]\n"
        index = int(parts[1])
        if index >= len(self.outlets):
            return "404 Not Found", f"no outlet {index}\n"
        outlet = self.outlets[index]
        if len(parts) == 2:
            return "200 OK", "1" if outlet.is_on else "0"
        if parts[2] == "1":
            await outlet.on()
        elif parts[2] == "0":
            await outlet.off()
        else:
            return "400 Bad Request", "value must be 0 or 1\n"
        return "200 OK", "1" if outlet.is_on else "0"


    def _sensors(self, parts: list[str], query: dict[str, list[str]]) -> tuple[str, str]:
        """/sensors/<index>: the board's sensor model; /sensors/<index>/throttle?seconds=S&khz=K
        (test hook): S seconds at K kHz from now (seconds=0 ends a throttle)."""
        index = int(parts[1])
        if index >= len(self.outlets) or self.outlets[index].sensors is None:
            return "404 Not Found", f"no sensors on outlet {index}\n"
        sensors = self.outlets[index].sensors
        if len(parts) == 2:
            return "200 OK", json.dumps(sensors.state())
        try:
            seconds = float(query["seconds"][0])
            khz = int(query["khz"][0])
        except (KeyError, IndexError, ValueError):
            seconds = khz = -1
        if parts[2] != "throttle" or not 0 <= seconds <= 3600 or khz <= 0:
            return "400 Bad Request", "use /sensors/<index>/throttle?seconds=S&khz=K\n"
        return "200 OK", json.dumps(sensors.throttle(seconds, khz))

    async def _tasmota(self, index: int, query: dict[str, list[str]]) -> tuple[str, str]:
        """Tasmota's `cm?cmnd=Power1 on|off`: a one-outlet smart plug per board."""
        command = (query.get("cmnd") or [""])[0].split()
        if index >= len(self.outlets) or len(command) != 2 or command[0].lower() != "power1":
            return "400 Bad Request", json.dumps({"Command": "Unknown"})
        outlet = self.outlets[index]
        if command[1].lower() in ("on", "1"):
            await outlet.on()
        elif command[1].lower() in ("off", "0"):
            await outlet.off()
        return "200 OK", json.dumps({"POWER1": "ON" if outlet.is_on else "OFF"})


async def serve(config: dict) -> None:
    logdir = Path(config["logdir"])
    brokers = [SerialBroker(b["name"], b.get("serial_port"), Path(b["serial_socket"]),
                            logdir / f"{b['name']}-console.log",
                            Path(b["pty_link"]) if b.get("pty_link") else None)
               for b in config["boards"]]
    outlets = [Outlet(b, logdir) for b in config["boards"]]
    for outlet, broker in zip(outlets, brokers, strict=False):
        outlet.broker = broker
    for broker in brokers:
        await broker.start()
    for outlet in outlets:
        if outlet.sensors is not None:
            outlet.sensors.start()
    pdu = PDU(outlets)
    for index, board in enumerate(config["boards"]):
        await pdu.serve_board(index, board["power_port"])
    await pdu.serve_control(Path(config["control_socket"]))
    log.info("virtual lab ready: %d boards, control on %s", len(brokers),
             config["control_socket"])
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for outlet in outlets:
        await outlet.off()


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    config = json.loads(Path(sys.argv[1]).read_text())
    os.makedirs(config["logdir"], exist_ok=True)
    asyncio.run(serve(config))


if __name__ == "__main__":
    main()
