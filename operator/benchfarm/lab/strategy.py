"""benchfarm's labgrid Strategy: a board from off to its shell, with the boot timed on the way.

labgrid's ShellStrategy power-cycles and waits for the shell; a benchmark lab also needs to know
when each boot stage showed on the console (power-on, first byte, the kernel's banner, init, the
prompt) to report boot time as the vendors' guides define it. `BenchfarmStrategy` does the same
transitions through labgrid's protocols — whatever power and console drivers the place's
environment names (a PDU's REST outlet, pdudaemon, a USB hub port; a serial server, ser2net) —
and watches every byte the console driver reads on the way to the prompt.

States: off → bootloader (when the environment has a bootloader driver) → shell. Power-on is
dated by the power driver's own labgrid step (`on`, done), the stages by the console bytes
(`core.readings.boot.BootWatcher`).
"""

from __future__ import annotations

import enum
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import attr
from labgrid import target_factory
from labgrid.binding import BindingState
from labgrid.step import step, steps
from labgrid.strategy import Strategy, StrategyError
from pexpect import TIMEOUT as PexpectTimeout

from benchfarm.api.devicetype import BootSpec
from benchfarm.api.outcomes import BoardFaultKind, LabFault
from benchfarm.core.readings.boot import BootTimeline, BootWatcher
from benchfarm.errors import BoardFault, DeployedBootFailed, InfraError
from benchfarm.lab.serialport import read_in_chunks


def first_line(exc: BaseException) -> str:
    """pexpect errors carry a multi-line dump of the expect state; people need the first line."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class _PerThreadStack:
    """A list that is a different list in every thread.

    labgrid records nested `@step`s on one process-wide stack and asserts that each step pops
    its own entry: it expects one thread per process to drive drivers. A session drives one
    board (the operator none: health checks are sessions too), but from more than one thread
    at a time: during a low-power step the rail sampler's thread captures with the sigrok
    driver (`lab.rails`) and a timer writes to the console to wake the board (`lab.lowpower`)
    while the session's own thread reads the console, each a labgrid step. Per thread, their
    steps nest as they should.
    """

    def __init__(self) -> None:
        self._local = threading.local()

    def _items(self) -> list[Any]:
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

    def __iter__(self) -> Iterator[Any]:
        return iter(self._items())

    def append(self, item: Any) -> None:
        self._items().append(item)

    def pop(self, *args: int) -> Any:
        return self._items().pop(*args)


if not isinstance(steps._stack, _PerThreadStack):
    steps._stack = _PerThreadStack()


# The boot stage the strategy itself dates: the bootloader at its prompt, its init commands run.
BOOTLOADER_READY = "bootloader-ready"
CRASH_CARRY = 256         # characters of the previous console chunk searched with the next
CRASH_LINE = 300          # characters of a failure marker's line a fault quotes
CRASH_LINE_WAIT = 1.0     # seconds to wait for the rest of a marker's line before raising


class Status(enum.Enum):
    unknown = 0
    off = 1
    bootloader = 2
    shell = 3


@target_factory.reg_driver
@attr.s(eq=False)
class BenchfarmStrategy(Strategy):
    """Off, bootloader and shell for a benchfarm session; `boot` times the way to the shell.

    A session gives it the device type's boot facts and the run's serial log with `prepare()`;
    without them (`labgrid-client -s shell`) it boots to the prompt with no stage markers."""

    bindings = {
        "power": "PowerProtocol",
        "console": "ConsoleProtocol",
        "bootloader": {"LinuxBootProtocol", None},   # U-Boot, barebox: when the board has one
        "shell": "ShellDriver",
    }

    status: Status = attr.ib(default=Status.unknown)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.place = self.target.name
        self.boot_spec: BootSpec | None = None
        self.sink: Callable[[float, bytes], None] | None = None
        self.power_on_wall: float | None = None
        self._watcher: BootWatcher | None = None
        self._crash_patterns: list[re.Pattern[str]] = []
        self._crash_carry = ""   # the end of the last chunk: a marker may span two reads
        # a marker seen before its line ended: (the line so far, when to raise regardless)
        self._crash_line: tuple[str, float] | None = None
        self.software: dict[str, str] = {}   # bootloader variables naming staged software

    def deploy(self, variables: dict[str, str]) -> None:
        """Boot staged software from now on: the bootloader gets these variables (the names
        `lab.deploy` staged) before its boot command runs; {} boots the board's own again."""
        if variables and self.bootloader is None:
            raise InfraError(f"{self.place}: software can only be deployed through a bootloader "
                             f"driver, and its environment has none",
                             reason=LabFault.staging_failed)
        self.software = dict(variables)

    def _fault(self, timeline: BootTimeline, message: str, reason: BoardFaultKind
               ) -> BoardFault:
        """A failed boot, saying whether the bootloader had loaded the run's own software by then
        (`DeployedBootFailed`); whose fault that is, the session decides (`session.blame`)."""
        if self.software and BOOTLOADER_READY in timeline.events:
            return DeployedBootFailed(f"{message}; the board had reached its bootloader and "
                                      f"loaded the deployed software", reason=reason)
        return BoardFault(message, reason=reason)

    def prepare(self, boot_spec: BootSpec, sink: Callable[[float, bytes], None] | None = None) -> None:
        """The device type's boot markers, and who else sees every console byte (the run's
        serial log). The boot ends at the ShellDriver's prompt."""
        self.boot_spec, self.sink = boot_spec, sink
        self._crash_patterns = [re.compile(rx) for rx in boot_spec.failures]
        self._hook_console()

    def _hook_console(self) -> None:
        """See every chunk the console driver reads, whatever driver it is, whoever reads."""
        console = self.console
        if getattr(console, "_benchfarm_hooked", False):
            return
        read_in_chunks(console)
        read = console._read

        def timed_read(*args: Any, **kwargs: Any) -> bytes:
            data: bytes = read(*args, **kwargs)
            if data:
                self._on_console(time.monotonic(), data)
            elif self._crash_line is not None and self.status == Status.shell:
                # a quiet console after a marker: raise with what of its line came
                self._crash_end("", time.monotonic())
            return data

        console._read = timed_read
        console._benchfarm_hooked = True

    def _on_console(self, when: float, data: bytes) -> None:
        if self.sink is not None:
            self.sink(when, data)
        if self._watcher is not None:
            self._watcher.feed(when, data)
        elif self.status == Status.shell and self._crash_patterns:
            self._crash_watch(data)

    def _crash_watch(self, data: bytes) -> None:
        """At the shell (a command running): the device type's failure markers (a kernel panic)
        mean the board went down under the command. Raised into whoever reads the console, so
        the command stops at once instead of waiting out its timeout; who is to blame is the
        session's decision (`session.blame`), not this one's. The fault quotes the marker's
        whole line: a read may end in its middle, so the rest is awaited (a newline, the
        quote's budget, or `CRASH_LINE_WAIT` seconds, whichever comes first)."""
        text = data.decode("utf-8", "replace")
        if self._crash_line is not None:
            self._crash_end(text, time.monotonic())
            return
        text = self._crash_carry + text
        self._crash_carry = text[-CRASH_CARRY:]
        for rx in self._crash_patterns:
            if m := rx.search(text):
                start = text.rfind("\n", 0, m.start()) + 1
                self._crash_line = ("", time.monotonic() + CRASH_LINE_WAIT)
                self._crash_end(text[start:], time.monotonic())
                return

    def _crash_end(self, text: str, now: float) -> None:
        """Add to a marker's line; raise once it is whole, at its budget, or out of time."""
        assert self._crash_line is not None
        line, deadline = self._crash_line
        line = (line + text)[:CRASH_LINE + 1]
        end = line.find("\n")
        if end < 0 and len(line) <= CRASH_LINE and now < deadline:
            self._crash_line = (line, deadline)
            return
        self._crash_line = None
        self.status, self._crash_carry = Status.unknown, ""
        line = line[: end if end >= 0 else None].strip()
        raise BoardFault(f"{self.place}: the board went down while a command ran: "
                         f"{line[:CRASH_LINE]}", reason=BoardFaultKind.crashed)

    # -- transitions --------------------------------------------------------------------------
    def _activate(self, driver: Any) -> None:
        try:
            self.target.activate(driver)
        except BoardFault:   # the board went down as the driver started (`_crash_watch`)
            raise
        except Exception as exc:
            raise InfraError(f"{self.place}: cannot activate {type(driver).__name__}: "
                             f"{type(exc).__name__}: {first_line(exc)}",
                             reason=LabFault.lab_unreachable) from exc

    @step(args=["status"])
    def transition(self, status: Status | str, *, timeout: float | None = None) -> None:
        if not isinstance(status, Status):
            status = Status[status]
        if status == Status.off:
            self._off()
        elif status == Status.bootloader:
            if self.bootloader is None:
                raise StrategyError(f"{self.place} has no bootloader driver")
            self.boot(timeout, stop_in_bootloader=True)
        elif status == Status.shell:
            self.boot(timeout)
            self.activate_shell()
        else:
            raise StrategyError(f"can not transition to {status}")

    def force(self, status: Status | str) -> None:
        self.status = status if isinstance(status, Status) else Status[status]

    def _off(self) -> None:
        self.target.deactivate(self.shell)   # the console stays open: the log goes on
        if self.bootloader is not None:
            self.target.deactivate(self.bootloader)
        self._activate(self.power)
        try:
            self.power.off()
        except Exception as exc:
            raise InfraError(f"{self.place}: power off failed: {type(exc).__name__}: {exc}",
                             reason=LabFault.power_failed) from exc
        self.status = Status.off

    def _power_on(self) -> float:
        """Switch on; when the power driver's `on` step finished (the switch confirmed it)."""
        done: list[float] = []

        def on_step(event: Any) -> None:
            s = event.step
            if s is not None and s.source is self.power and s.title == "on" \
                    and s.status == "done":
                done.append(event.ts)

        steps.subscribe(on_step)
        try:
            self.power.on()
        except Exception as exc:
            raise InfraError(f"{self.place}: power on failed: {exc}",
                             reason=LabFault.power_failed) \
                from exc
        finally:
            steps.unsubscribe(on_step)
        self.power_on_wall = time.time()
        return done[-1] if done else time.monotonic()

    def boot(self, timeout: float | None = None, *,
             stop_in_bootloader: bool = False) -> BootTimeline:
        """Power-cycle and time the boot to the shell prompt; BoardFault if it never comes.

        With a bootloader driver: stop autoboot, run its init commands, boot its boot command
        (or stay at its prompt). Every byte either driver reads is watched for the stages."""
        spec = self.boot_spec or BootSpec()   # labgrid-client -s shell: no device type at hand
        self._hook_console()
        # a marker's line still awaited belongs to the boot this one ends: not a fault of this
        self._crash_line, self._crash_carry = None, ""
        self._off()
        self._activate(self.console)
        self.console.settle(0.01, timeout=5.0)   # what the port held from before this cycle
        timeout = timeout or spec.timeoutSeconds
        power_on = self._power_on()
        watcher = self._watcher = BootWatcher(power_on, spec.markers, self.shell.prompt,
                                              spec.failures, spec.silenceSeconds,
                                              spec.silenceAfterSeconds)
        try:
            deadline = power_on + timeout
            if self.bootloader is not None:
                self._through_bootloader(watcher, power_on)
                if stop_in_bootloader:
                    self.status = Status.bootloader
                    return watcher.timeline
            while not watcher.done and time.monotonic() < deadline:
                if (silent := watcher.hung(time.monotonic())) is not None:
                    timeline = watcher.finish()
                    last = max(timeline.events, key=lambda k: timeline.events[k])
                    raise self._fault(timeline, f"{self.place}: boot hung: console silent for "
                                      f"{silent:.1f} s after {last} (limit "
                                      f"{watcher.silence_limit():.0f} s)", BoardFaultKind.boot_hung)
                try:
                    self.console.read(size=1, max_size=65536, timeout=0.2)
                except PexpectTimeout:
                    continue
                except Exception as exc:
                    raise BoardFault(f"{self.place}: serial port failed: {first_line(exc)}",
                                     reason=BoardFaultKind.serial_failed) from exc
        finally:
            self._watcher = None
        timeline = watcher.finish()
        if watcher.failure is not None:
            raise self._fault(timeline, f"{self.place}: boot failed: {watcher.failure[:300]}",
                              BoardFaultKind.boot_failed)
        if not watcher.done:
            seen = ", ".join(k for k in timeline.events) or "nothing"
            if "first-byte" not in timeline.events:
                raise BoardFault(f"{self.place}: serial console silent for {timeout:.0f} s after "
                                 f"power-on", reason=BoardFaultKind.serial_silent)
            raise self._fault(timeline, f"{self.place}: no shell prompt {timeout:.0f} s after "
                              f"power-on (saw: {seen})", BoardFaultKind.boot_timeout)
        self.status = Status.shell
        return timeline

    def _through_bootloader(self, watcher: BootWatcher, power_on: float) -> None:
        """Stop autoboot at the bootloader's prompt (its init commands run there), then boot."""
        try:
            self.target.activate(self.bootloader)
        except Exception as exc:
            if watcher.failure is None and "first-byte" not in watcher.timeline.events:
                raise BoardFault(f"{self.place}: serial console silent after power-on",
                                 reason=BoardFaultKind.serial_silent) from exc
            raise BoardFault(f"{self.place}: the bootloader did not reach its prompt or an init "
                             f"command failed: {type(exc).__name__}: {first_line(exc)}",
                             reason=BoardFaultKind.bootloader_failed) from exc
        watcher.timeline.events.setdefault(BOOTLOADER_READY,
                                           round(time.monotonic() - power_on, 3))
        for name, value in self.software.items():
            try:
                self.bootloader.run_check(f"setenv {name} {value}")
            except Exception as exc:
                raise BoardFault(f"{self.place}: the bootloader refused `setenv {name}`: "
                                 f"{type(exc).__name__}: {first_line(exc)}",
                                 reason=BoardFaultKind.bootloader_failed) from exc
        self.bootloader.boot("")

    # -- the shell ----------------------------------------------------------------------------
    def activate_shell(self) -> None:
        """Activate the ShellDriver. Right after a boot the watch has read the prompt already:
        a newline brings a fresh one, instead of the driver waiting `await_login_timeout` (1 s
        here) in silence before it sends that newline itself."""
        if self.shell.state == BindingState.active:
            return
        if self.status == Status.shell:
            self.console.sendline("")
        self._activate(self.shell)
    def interrupt(self) -> None:
        """Stop a command that overran its timeout and get the prompt back."""
        try:
            for _ in range(3):
                self.console.sendcontrol("c")
                time.sleep(0.3)
            self.console.sendline("")
            self.console.expect(self.shell.prompt, timeout=10)
        except Exception as exc:
            raise BoardFault(f"{self.place}: shell did not come back after a timeout: "
                             f"{first_line(exc)}", reason=BoardFaultKind.shell_lost) from exc
