#!/usr/bin/env python3
"""Simulated boards for the scale benchmark: a thousand boards in one process, cheap enough that
what is measured is benchfarm, the API server and the labgrid coordinator, not QEMU.

Each board has what a real board offers benchfarm: a serial TCP port that stays connectable while
the board is off, and an outlet on a PDU in labgrid's `simplerest` dialect (GET
/outlet/<index>/1 on, /0 off, /outlet/<index>/ answers 1 or 0), the same dialect the virtual lab's
PDU speaks, so labgrid's NetworkSerialPort and NetworkPowerPort drive them unchanged. Powered on,
a board plays a Linux boot log with a realistic pace (printk timestamps; the markers of the
`sim-board` device type) and then gives a real shell — `sh -i` on a pseudo-terminal with the
board's prompt — so labgrid's ShellDriver and benchfarm's runner talk to it as to a board's
console. Powered off, the shell is killed and the port goes quiet.

Every outlet switch is appended to an event log (JSON lines: wall time, board, on/off, whether it
was on), which the benchmark reads for apply → power-on and board freed → next power-on.

Usage: simboards.py CONFIG.json  ({"boards": N, "serial_base": P, "pdu_port": Q, "events": PATH,
                                   "workdir": DIR, "boot_seconds": S})
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import resource
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

BOOT_LINES = [   # (share of the boot time, line); markers: Linux version, Run /init, userspace up
    (0.00, "Linux version 6.1.0-sim-arm64 (benchfarm@simboards) (gcc 12.2.0) #1 SMP PREEMPT"),
    (0.00, "Machine model: benchfarm simulated board"),
    (0.05, "Memory: 1948724K/2097152K available"),
    (0.10, "smp: Brought up 1 node, 4 CPUs"),
    (0.30, "clocksource: Switched to clocksource arch_sys_counter"),
    (0.50, "mmc0: new HS200 MMC card at address 0001"),
    (0.70, "Freeing unused kernel memory: 1024K"),
    (0.72, "Run /init as init process"),
    (0.95, "benchfarm-init: userspace up"),
]


class SimBoard:
    def __init__(self, index: int, port: int, workdir: Path, boot_seconds: float,
                 events) -> None:  # noqa: ANN001
        self.index = index
        self.name = f"sim-{index:04d}"
        self.port = port
        self.workdir = workdir
        self.boot_seconds = boot_seconds
        self.events = events
        self.clients: set[asyncio.StreamWriter] = set()
        self.on = False
        self.boot_task: asyncio.Task | None = None
        self.shell: subprocess.Popen | None = None
        self.master: int | None = None

    async def start(self) -> None:
        await asyncio.start_server(self._on_client, host="127.0.0.1", port=self.port, backlog=8)

    # -- serial -------------------------------------------------------------------------------
    def _send(self, data: bytes) -> None:
        for client in list(self.clients):
            try:
                client.write(data)
            except (ConnectionError, RuntimeError):
                self.clients.discard(client)

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.clients.add(writer)
        try:
            while data := await reader.read(4096):
                if self.master is not None:
                    try:
                        os.write(self.master, data)
                    except OSError:
                        pass
        except ConnectionError:
            pass
        finally:
            self.clients.discard(writer)
            writer.close()

    def _on_shell_output(self) -> None:
        try:
            data = os.read(self.master, 65536) if self.master is not None else b""
        except OSError:
            data = b""
        if not data:
            self._kill_shell()
            return
        self._send(data)

    # -- power --------------------------------------------------------------------------------
    def switch(self, on: bool) -> None:
        self.events.write(json.dumps({"t": time.time(), "board": self.name,
                                      "power": "on" if on else "off", "was": self.on}) + "\n")
        self.events.flush()
        if self.on:
            if self.boot_task is not None:
                self.boot_task.cancel()
            self._kill_shell()
        self.on = on
        if on:
            self.boot_task = asyncio.get_running_loop().create_task(self._boot())

    async def _boot(self) -> None:
        start = time.monotonic()
        for share, line in BOOT_LINES:
            delay = start + share * self.boot_seconds - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            self._send(f"[{time.monotonic() - start:12.6f}] {line}\r\n".encode())
        await asyncio.sleep(max(0.0, start + self.boot_seconds - time.monotonic()))
        self._start_shell()

    def _start_shell(self) -> None:
        master, slave = os.openpty()     # a terminal in cooked mode with echo, as a getty's
        home = self.workdir / self.name
        home.mkdir(parents=True, exist_ok=True)

        def controlling_tty() -> None:   # the shell's terminal, as getty gives it on a board
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.shell = subprocess.Popen(
            ["/bin/sh", "-i"], stdin=slave, stdout=slave, stderr=slave, cwd=home,
            env={"PS1": f"root@{self.name}:~# ", "HOME": str(home), "TERM": "dumb",
                 "PATH": "/usr/local/bin:/usr/bin:/bin"},
            start_new_session=True, preexec_fn=controlling_tty)
        os.close(slave)
        os.set_blocking(master, False)
        self.master = master
        asyncio.get_running_loop().add_reader(master, self._on_shell_output)

    def _kill_shell(self) -> None:
        if self.master is not None:
            asyncio.get_running_loop().remove_reader(self.master)
            os.close(self.master)
            self.master = None
        if self.shell is not None:
            try:
                os.killpg(self.shell.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.shell.wait()
            self.shell = None


class Pdu:
    """labgrid's simplerest dialect over a minimal HTTP/1.0 server."""

    def __init__(self, boards: list[SimBoard]) -> None:
        self.boards = boards

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = (await reader.readline()).decode(errors="replace").split()
            while (await reader.readline()).strip():
                pass
            status, body = self.answer(request[1] if len(request) > 1 else "/")
            writer.write(f"HTTP/1.0 {status}\r\nContent-Type: text/plain\r\nContent-Length: "
                         f"{len(body)}\r\n\r\n{body}".encode())
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    def answer(self, path: str) -> tuple[str, str]:
        parts = [p for p in path.split("/") if p]
        if len(parts) not in (2, 3) or parts[0] != "outlet" or not parts[1].isdigit() or \
                int(parts[1]) >= len(self.boards):
            return "404 Not Found", "no such outlet\n"
        board = self.boards[int(parts[1])]
        if len(parts) == 2:
            return "200 OK", "1" if board.on else "0"
        if parts[2] not in ("0", "1"):
            return "400 Bad Request", "0 or 1\n"
        board.switch(parts[2] == "1")
        return "200 OK", "ok\n"


async def main(config_path: str) -> None:
    config = json.loads(Path(config_path).read_text())
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))   # a port per board, and clients
    events = open(config["events"], "a", buffering=1)  # noqa: SIM115 (lives as long as we do)
    workdir = Path(config["workdir"])
    boards = [SimBoard(i, config["serial_base"] + i, workdir, config.get("boot_seconds", 2.0),
                       events) for i in range(config["boards"])]
    for board in boards:
        await board.start()
    pdu = Pdu(boards)
    await asyncio.start_server(pdu.handle, host="127.0.0.1", port=config["pdu_port"], backlog=256)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"simboards: {len(boards)} boards, serial {config['serial_base']}.., PDU "
          f"{config['pdu_port']}", flush=True)
    await stop.wait()
    for board in boards:
        if board.on:
            board.switch(False)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
