"""One board in benchfarm's hands: labgrid drivers, a timed power cycle, commands on its shell.

The place's resources come from the coordinator, as its exporter publishes them: a console is a
NetworkSerialPort (a serial server, or a local tty the exporter serves through ser2net), power is
whichever power resource the place carries (a PDU's REST outlet, a pdudaemon port, a YKUSH or USB
hub port, a Tasmota plug, ...). labgrid's own drivers act on them: the power driver labgrid has
for that resource, SerialDriver for the console, ShellDriver for commands. The serial driver is
wrapped so every byte read is timestamped and kept for the run's serial log.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import attr
from labgrid import Target, target_factory
from labgrid.step import steps as labgrid_steps
from labgrid.driver import SerialDriver, ShellDriver
from pexpect import TIMEOUT as PexpectTimeout

from ..api.devicetype import DeviceType
from ..core.boot import BootTimeline, BootWatcher
from ..errors import BoardFault, InfraError

log = logging.getLogger(__name__)


def _first_line(exc: BaseException) -> str:
    """pexpect errors carry a multi-line dump of the expect state; people need the first line."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class _PerThreadStack:
    """A list that is a different list in every thread.

    labgrid records nested `@step`s on one process-wide stack and asserts that each step pops
    its own entry; it expects one board per process. benchfarm drives many boards from worker
    threads, so the stack must be per thread or concurrent sessions trip that assertion.
    """

    def __init__(self) -> None:
        self._local = threading.local()

    def _items(self) -> list:
        items = getattr(self._local, "items", None)
        if items is None:
            items = self._local.items = []
        return items

    def __getitem__(self, index: int) -> Any:
        return self._items()[index]

    def __len__(self) -> int:
        return len(self._items())

    def __contains__(self, item: object) -> bool:
        return item in self._items()

    def __iter__(self):  # noqa: ANN204
        return iter(self._items())

    def append(self, item: Any) -> None:
        self._items().append(item)

    def pop(self, *args: int) -> Any:
        return self._items().pop(*args)


if not isinstance(labgrid_steps._stack, _PerThreadStack):
    labgrid_steps._stack = _PerThreadStack()


# A place's power resource (as the coordinator lists it) -> the labgrid driver that switches it.
POWER_DRIVERS = {
    "NetworkPowerPort": "NetworkPowerDriver",
    "PDUDaemonPort": "PDUDaemonDriver",
    "NetworkYKUSHPowerPort": "YKUSHPowerDriver",
    "NetworkUSBPowerPort": "USBPowerDriver",
    "NetworkSiSPMPowerPort": "SiSPMPowerDriver",
    "TasmotaPowerPort": "TasmotaPowerDriver",
}


@target_factory.reg_driver
@attr.s(eq=False)
class RecordingSerialDriver(SerialDriver):
    """labgrid's SerialDriver, plus a sink that sees every chunk read with its arrival time."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.sink: Callable[[float, bytes], None] | None = None

    def _read(self, size: int = 1, timeout: float = 0.0, max_size: int | None = None) -> bytes:
        data = super()._read(size=size, timeout=timeout, max_size=max_size)
        if data and self.sink is not None:
            self.sink(time.monotonic(), data)
        return data


@dataclass
class CommandResult:
    command: str
    output: str
    exit_code: int | None
    seconds: float
    timed_out: bool = False


class SerialLog:
    """The whole console of a session, as received, streamed to a file (memory stays bounded).

    Without a path (health checks, tools) it keeps the bytes in memory."""

    def __init__(self, path: Path | None = None, limit: int = 256 * 1024 * 1024) -> None:
        self.path = path
        self.limit = limit
        self.size = path.stat().st_size if path is not None and path.exists() else 0
        self._memory = bytearray()
        self._file = path.open("ab") if path is not None else None

    def add(self, _when: float, data: bytes) -> None:
        if self.size >= self.limit:
            return
        if self._file is not None:
            self._file.write(data)
            self._file.flush()
        else:
            self._memory += data
        self.size += len(data)

    def since(self, offset: int) -> bytes:
        if self._file is None:
            return bytes(self._memory[offset:])
        with self.path.open("rb") as f:
            f.seek(offset)
            return f.read()

    def bytes(self) -> bytes:
        return self.since(0)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class Board:
    """labgrid drivers for one acquired place. Not thread-safe: one session thread owns it."""

    def __init__(self, place: str, resources: dict[str, dict[str, Any]], device_type: DeviceType,
                 serial_log: SerialLog | None = None) -> None:
        self.place = place
        self.device_type = device_type
        self.serial_log = serial_log or SerialLog()
        self.target = Target(place)
        power = next((cls for cls in POWER_DRIVERS if cls in resources), None)
        if "NetworkSerialPort" not in resources or power is None:
            raise InfraError(f"place {place} lacks a serial port or a power port labgrid can "
                             f"switch (has {', '.join(resources) or 'nothing'}); is its exporter "
                             f"running?", reason="PlaceIncomplete")
        for cls in ("NetworkSerialPort", power):
            args = {k: v for k, v in resources[cls].items() if k != "extra"}
            target_factory.make_resource(self.target, cls, None, args)
        self.serial = RecordingSerialDriver(self.target, name=None)
        self.power = target_factory.drivers[POWER_DRIVERS[power]](self.target, name=None)
        self.shell = ShellDriver(self.target, name=None, prompt=device_type.console.prompt,
                                 login_prompt="benchfarm-no-login-prompt", username="root",
                                 login_timeout=30, await_login_timeout=1)
        self._watcher: BootWatcher | None = None
        self._lock = threading.Lock()
        self.last_power_on_wall: float | None = None
        self.serial.sink = self._on_serial

    def _on_serial(self, when: float, data: bytes) -> None:
        self.serial_log.add(when, data)
        if self._watcher is not None:
            self._watcher.feed(when, data)

    # -- power and boot -----------------------------------------------------------------------
    def _activate(self, driver: Any) -> None:
        try:
            self.target.activate(driver)
        except Exception as exc:
            raise InfraError(f"{self.place}: cannot activate {type(driver).__name__}: "
                             f"{type(exc).__name__}: {_first_line(exc)}",
                             reason="LabUnreachable") from exc

    def power_off(self) -> None:
        self.target.deactivate(self.shell)
        self._activate(self.power)
        try:
            self.power.off()
        except Exception as exc:
            raise InfraError(f"{self.place}: power off failed: {type(exc).__name__}: {exc}",
                             reason="PowerFailed") from exc

    def boot(self, timeout: float | None = None) -> BootTimeline:
        """Power-cycle and time the boot until the shell prompt; InfraError if it never comes."""
        self.power_off()
        self._activate(self.serial)
        self._drain()
        boot = self.device_type.boot
        timeout = timeout or boot.timeoutSeconds
        try:
            self.power.on()
        except Exception as exc:
            raise InfraError(f"{self.place}: power on failed: {exc}", reason="PowerFailed") from exc
        power_on = time.monotonic()  # the switch has confirmed "on"
        self.last_power_on_wall = time.time()
        watcher = self._watcher = BootWatcher(power_on, boot.markers,
                                              self.device_type.console.prompt, boot.failures)
        try:
            deadline = power_on + timeout
            while not watcher.done and time.monotonic() < deadline:
                try:
                    self.serial.read(size=1, max_size=65536, timeout=0.2)
                except PexpectTimeout:
                    continue
                except Exception as exc:
                    raise BoardFault(f"{self.place}: serial port failed: {_first_line(exc)}",
                                     reason="SerialFailed") from exc
        finally:
            self._watcher = None
        timeline = watcher.finish()
        if watcher.failure is not None:
            raise BoardFault(f"{self.place}: boot failed: {watcher.failure[:300]}",
                             reason="BootFailed")
        if not watcher.done:
            seen = ", ".join(k for k in timeline.events) or "nothing"
            if "first-byte" not in timeline.events:
                raise BoardFault(f"{self.place}: serial console silent for {timeout:.0f} s after "
                                 f"power-on", reason="SerialSilent")
            raise BoardFault(f"{self.place}: no shell prompt {timeout:.0f} s after power-on "
                             f"(saw: {seen})", reason="BootTimeout")
        return timeline

    def _drain(self) -> None:
        """Drop what is waiting on the serial port from before this power cycle."""
        for _ in range(100):
            try:
                self.serial.read(size=1, max_size=65536, timeout=0.05)
            except PexpectTimeout:
                return
            except Exception:
                return

    # -- shell --------------------------------------------------------------------------------
    def run(self, command: str, timeout: float) -> CommandResult:
        self._activate(self.shell)
        start = time.monotonic()
        try:
            lines, _, code = self.shell.run(command, timeout=timeout)
            return CommandResult(command, "\n".join(lines), code, time.monotonic() - start)
        except Exception as exc:
            # pexpect's TIMEOUT, or a labgrid timeout error: the command overran, not the shell
            if isinstance(exc, PexpectTimeout) or "TIMEOUT" in type(exc).__name__.upper():
                self._interrupt()
                return CommandResult(command, "", None, time.monotonic() - start, timed_out=True)
            raise BoardFault(f"{self.place}: shell failed: {_first_line(exc)}",
                             reason="ShellFailed") from exc

    def _interrupt(self) -> None:
        """Stop a command that overran its timeout and get the prompt back."""
        try:
            for _ in range(3):
                self.serial.write(b"\x03")
                time.sleep(0.3)
            self.serial.sendline("")
            self.serial.expect(self.device_type.console.prompt, timeout=10)
        except Exception as exc:
            raise BoardFault(f"{self.place}: shell did not come back after a timeout: "
                             f"{_first_line(exc)}", reason="ShellLost") from exc

    def close(self) -> None:
        try:
            self.target.deactivate_all_drivers()
        except Exception:  # closing is best effort; the place is released by the caller
            log.debug("deactivate failed on %s", self.place, exc_info=True)
