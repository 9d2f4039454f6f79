"""One board in benchfarm's hands: its labgrid target, a timed power cycle, commands on its shell.

The target is labgrid's, built from the labgrid environment of the board's device type
(`lab.environment`): a RemotePlace expanded from the coordinator, the drivers the environment
names, and `BenchfarmStrategy`, which boots the board and times the boot. This module adds what a
benchmark run needs around them: the run's serial log (every console byte, streamed to a file),
and commands whose timeout is a result, not a crash, and whose output is held in bounded memory
whatever the board prints (its head and tail; the serial log has every byte).
"""

from __future__ import annotations

import logging
import shlex
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labgrid.util import gen_marker
from pexpect import TIMEOUT as PexpectTimeout

from benchfarm.api.devicetype import DeviceType
from benchfarm.api.outcomes import BoardFaultKind
from benchfarm.core.readings.boot import BootTimeline
from benchfarm.core.readings.capture import KERNEL_LINE, HeadTail, ShellOutput, through_kernel_lines
from benchfarm.errors import BoardFault
from benchfarm.lab.environment import build_target, environment, forget_target
from benchfarm.lab.strategy import BenchfarmStrategy, first_line

log = logging.getLogger(__name__)
OUTPUT_LIMIT = 16 * 1024 * 1024       # one command's output in memory: its head and its tail
MEMORY_LIMIT = 1024 * 1024            # a console without a file (health checks): head and tail
FILE_LIMIT = 256 * 1024 * 1024        # a serial log file: the spool's disk
READ_CHUNK = 65536


@dataclass
class CommandResult:
    command: str
    output: str
    exit_code: int | None
    seconds: float
    timed_out: bool = False


class SerialLog:
    """The whole console of a session, as received, streamed to a file (memory stays bounded).

    Without a path (health checks, tools) it keeps the console's first and last bytes in memory,
    `limit` in all, and says how much it cut between them. A file stops growing at `limit` (the
    spool's disk), and its last line then says how many bytes it did not keep."""

    def __init__(self, path: Path | None = None, limit: int | None = None) -> None:
        self.path = path
        self.limit = limit or (FILE_LIMIT if path is not None else MEMORY_LIMIT)
        self.size = path.stat().st_size if path is not None and path.exists() else 0
        self.dropped = 0
        self._memory = HeadTail(self.limit, what="console log",
                                note="only the head and the tail are kept in memory") \
            if path is None else None
        self._file = path.open("ab") if path is not None else None

    def add(self, _when: float, data: bytes) -> None:
        if self._memory is not None:
            self._memory.add(data)
            self.size += len(data)
            return
        room = self.limit - self.size
        if len(data) > room:
            self.dropped += len(data) - max(room, 0)
            data = data[:max(room, 0)]
        if data and self._file is not None:
            self._file.write(data)
            self._file.flush()
            self.size += len(data)

    def since(self, offset: int) -> bytes:
        if self._memory is not None:
            return self._memory.since(offset)
        if self.path is None:     # a log without a file keeps its bytes in memory
            return b""
        with self.path.open("rb") as f:
            f.seek(offset)
            return f.read()

    def bytes(self) -> bytes:
        return self.since(0)

    def close(self) -> None:
        if self._file is not None:
            if self.dropped:
                self._file.write(f"\n[benchfarm: the serial log stopped at {self.limit} bytes; "
                                 f"{self.dropped} more bytes were not kept]\n".encode())
            self._file.close()


class CommandTimeout(PexpectTimeout):
    """pexpect's TIMEOUT of a command that overran, with its output so far."""

    def __init__(self, message: str, output: str) -> None:
        super().__init__(message)
        self.output = output


PROMPT_TRIES = 3          # prompt checks before a command counts as timed out
PROMPT_TRY_SECONDS = 10   # each one's wait: 30 s in all, labgrid's own single wait


def check_prompt(shell: Any) -> None:
    """labgrid's ShellDriver._check_prompt (echo a hidden marker, expect it and the prompt),
    read through kernel log lines (`core.readings.capture.KERNEL_LINE`): with one printed into the echo,
    labgrid's own waits its whole 30 s and the command counts as timed out, never having run.
    A kernel line can also land inside the prompt itself, which no pattern of the prompt reads
    through: the check is tried again with a new marker (the same 30 s in all), since the next
    prompt is very likely whole. pexpect's TIMEOUT when no try saw the prompt."""
    for left in range(PROMPT_TRIES - 1, -1, -1):
        marker = gen_marker()
        shell.console.sendline(f"echo '{marker[:4]}''{marker[4:]}'")
        try:
            shell.console.expect(through_kernel_lines(marker.encode()) + rb"(?:\s|" + KERNEL_LINE
                                 + rb")+" + shell.prompt.encode(), timeout=PROMPT_TRY_SECONDS)
            return
        except PexpectTimeout:
            if not left:
                raise


def run_bounded(shell: Any, command: str, timeout: float, limit: int
                ) -> tuple[str, int | None]:
    """Run `command` with labgrid's ShellDriver protocol (its prompt check, its `run` shell
    function and markers, read through kernel log lines), holding at most `limit` bytes of the
    output: its head and its tail (`core.readings.capture`). The ShellDriver's own `run` keeps all of
    it, twice (pexpect's buffer and the match), and searches the whole buffer again after every
    read. pexpect's TIMEOUT when the command overruns, with the output so far as its
    `output`."""
    console = shell.console
    check_prompt(shell)
    marker = gen_marker()
    capture = ShellOutput(marker, shell.prompt, limit)
    console.sendline(f"MARKER='{marker[:4]}''{marker[4:]}' run {shlex.quote(command)}")
    deadline = time.monotonic() + timeout
    while not capture.done:
        left = deadline - time.monotonic()
        if left <= 0:
            raise CommandTimeout(f"{command!r} still ran after {timeout:.0f} s", capture.text())
        try:
            capture.feed(console.read(size=1, max_size=READ_CHUNK, timeout=min(left, 1.0)))
        except PexpectTimeout:
            continue
    return capture.text(), capture.exit_code


class Board:
    """The labgrid target of one acquired place. Not thread-safe: one session thread owns it."""

    def __init__(self, place: str, resources: dict[str, dict[str, Any]], device_type: DeviceType,
                 session: Any, serial_log: SerialLog | None = None,
                 output_limit: int = OUTPUT_LIMIT, *,
                 labgrid_variables: Mapping[str, str] | None = None) -> None:
        """`resources`: the place's, as the coordinator lists them (for a derived environment);
        `session`: the labgrid ClientSession that acquired the place (`Coordinator.session()`);
        `output_limit`: the bytes of one command's output held in memory (head and tail);
        `labgrid_variables`: the `LG_*` a device type's environment may name
        (`lab.environment.labgrid_variables`)."""
        self.place = place
        self.output_limit = output_limit
        self.device_type = device_type
        self.serial_log = serial_log or SerialLog()
        # environment() always names the strategy, and build_target bound it or raised
        self.target = build_target(place, environment(place, resources, device_type,
                                                     labgrid_variables), session)
        self.strategy = self.target.get_driver(BenchfarmStrategy)
        self.strategy.prepare(device_type.boot, self.serial_log.add)
        self.power, self.console, self.shell = (self.strategy.power, self.strategy.console,
                                                self.strategy.shell)

    @property
    def last_power_on_wall(self) -> float | None:
        wall: float | None = self.strategy.power_on_wall
        return wall

    def boot(self, timeout: float | None = None) -> BootTimeline:
        """Power-cycle and time the boot until the shell prompt; BoardFault if it never comes."""
        timeline: BootTimeline = self.strategy.boot(timeout)
        return timeline

    def power_off(self) -> None:
        self.strategy.transition("off")

    def run(self, command: str, timeout: float) -> CommandResult:
        self.strategy.activate_shell()
        start = time.monotonic()
        try:
            output, code = run_bounded(self.shell, command, timeout, self.output_limit)
            return CommandResult(command, output, code, time.monotonic() - start)
        except BoardFault:   # the strategy saw the board go down (its failure markers)
            raise
        except Exception as exc:
            # pexpect's TIMEOUT, or a labgrid timeout error: the command overran, not the shell
            if isinstance(exc, PexpectTimeout) or "TIMEOUT" in type(exc).__name__.upper():
                self.strategy.interrupt()
                return CommandResult(command, getattr(exc, "output", ""), None,
                                     time.monotonic() - start, timed_out=True)
            raise BoardFault(f"{self.place}: shell failed: {first_line(exc)}",
                             reason=BoardFaultKind.shell_failed) from exc

    def _hang_up(self) -> None:
        """Close a network console's socket now. pyserial's `socket://` close then sleeps 0.3 s
        "in case of quick reconnects" — for this process's own next connection, and a board is
        closed once, at the end of a session: that sleep was a third of a second at the end of
        every run, before the place could be released."""
        port = getattr(self.console, "serial", None)
        sock = getattr(port, "_socket", None)
        if sock is None or not getattr(port, "is_open", False):
            return
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()
        if port is not None:
            port._socket, port.is_open = None, False

    def close(self) -> None:
        try:
            self._hang_up()
            self.target.deactivate_all_drivers()
        except Exception:  # closing is best effort; the place is released by the caller
            log.debug("deactivate failed on %s", self.place, exc_info=True)
        finally:
            forget_target(self.target)
