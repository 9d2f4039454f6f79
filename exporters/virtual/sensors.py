"""A virtual board's stand-in for cpufreq, thermal zones and throttling (issue 56).

QEMU boards have no cpufreq or thermal zones of their own, yet a result must say what it was
measured under, read the way a real board's sysfs is read. So the virtual lab keeps, per board,
a sensor model and pushes its tree into the guest, where the image's init
(build_image.SENSORS_SCRIPT) writes each value under /run/benchfarm/sys/<path>, the `root` a
virtual device type's `conditions` names:

- `SensorModel` (pure, time given): the temperature follows the board's power (the total mW of
  its rails' model, PowerModel) with a first-order thermal time constant from an ambient of
  35 °C; one cpufreq policy for every CPU, governor "performance", at the device type's clock
  unless throttled; a thermal zone `cpu-thermal` with a passive trip above which it throttles by
  itself (above anything it reaches unthrottled); a cooling device whose `cur_state` is the
  throttle depth and whose `stats/total_trans` counts its changes (as Linux counts them).
- `BoardSensors` (asyncio): ticks the model once a second, connects to the board's virtio-serial
  port (QEMU's `-chardev socket,server=on` of `org.benchfarm.sensors`) after each power-on and
  again when it drops, sends `relative/path value` lines (the whole tree and a line `ready` when
  connected and whenever the guest says `hello` on opening the port, then what changed, about
  once a second and at once on a throttle), and while throttled really slows the QEMU process:
  SIGSTOP/SIGCONT in 100 ms slices, running the fraction cur/max of each, through a pidfd (never
  another process), stopping when the window ends, the board is off, or a test hook froze it.

The test hook `/sensors/<index>/throttle?seconds=S&khz=K` (vlab.py, control socket only) opens a
window of S seconds at K kHz. The figures are a model: they say nothing of any hardware.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import signal
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("vlab.sensors")

AMBIENT_C = 35.0
TAU_SECONDS = 30.0         # the thermal time constant
C_PER_W = 20.0             # °C above ambient per W: ~43 °C idle, ~54 °C busy for ~0.4-1 W boards
TRIP_C = 85.0              # passive trip: far above what a board reaches unthrottled
HYSTERESIS_C = 5.0
MAX_STATE = 10             # cooling device states: 0 unthrottled .. 10 at the lowest frequency
TICK_SECONDS = 1.0
SLICE_SECONDS = 0.1        # the duty cycle's period while throttled
MAX_BACKLOG = 64 * 1024    # bytes queued for a guest that does not read: updates are skipped
# boards whose device type has no modelled rails: one rail with the x86 boards' total, so their
# temperature still follows their load
FALLBACK_RAILS = [{"name": "soc", "voltage": 1.0,
                   "model": {"off": 0.0, "suspended": 11.0, "idle": 420.0, "active": 965.0}}]



def heat_rails(rails: list[dict]) -> list[dict]:
    """The rails whose power model heats the board: its own when they have one (a sigrok
    board's rails are measured, not modelled), else FALLBACK_RAILS."""
    return rails if any("model" in r for r in rails) else FALLBACK_RAILS


POLICY = "devices/system/cpu/cpufreq/policy0"
ZONE = "class/thermal/thermal_zone0"
COOLING = "class/thermal/cooling_device0"


class SensorModel:
    """The sensors of one board: temperature, frequency, throttle counters. `now` is monotonic
    seconds; nothing here reads a clock or does I/O."""

    def __init__(self, max_khz: int, cpus: int = 1, *, ambient_c: float = AMBIENT_C,
                 tau_s: float = TAU_SECONDS, c_per_w: float = C_PER_W, trip_c: float = TRIP_C)\
            -> None:
        self.max_khz = int(max_khz)
        self.min_khz = self.max_khz // 5
        self.cpus = max(1, cpus)
        self.ambient_c, self.tau_s, self.c_per_w, self.trip_c = ambient_c, tau_s, c_per_w, trip_c
        self.temp_c = ambient_c
        self.power_mw = 0.0
        self.t: float | None = None
        self.window: tuple[float, int] | None = None      # (until, kHz): the test hook's
        self.tripped = False
        self.cooling_state = 0
        self.cooling_transitions = 0      # cooling_device0/stats/total_trans
        self.frequency_transitions = 0    # policy0/stats/total_trans
        self._khz = self.max_khz

    def step(self, now: float, power_mw: float) -> None:
        """Advance to `now` with the board drawing `power_mw` since the last step."""
        if self.t is not None and now > self.t:
            target = self.ambient_c + self.c_per_w * max(0.0, power_mw) / 1000
            self.temp_c = target + (self.temp_c - target) * math.exp(-(now - self.t) / self.tau_s)
        self.t = now if self.t is None else max(self.t, now)
        self.power_mw = power_mw
        if self.temp_c >= self.trip_c:
            self.tripped = True
        elif self.temp_c < self.trip_c - HYSTERESIS_C:
            self.tripped = False
        self._account(now)

    def booted(self) -> None:
        """A power-on: the kernel's counters start from zero again (its heat stays)."""
        self.cooling_transitions = self.frequency_transitions = 0

    def throttle(self, now: float, seconds: float, khz: int) -> None:
        """For `seconds` from `now` the board runs at `khz` (clamped to the policy's range);
        0 seconds ends a window."""
        khz = max(self.min_khz, min(self.max_khz, int(khz)))
        self.window = (now + seconds, khz) if seconds > 0 else None
        self._account(now)

    def cur_khz(self, now: float) -> int:
        khz = self.max_khz
        if self.window is not None and now < self.window[0]:
            khz = min(khz, self.window[1])
        if self.tripped:
            khz = min(khz, self.max_khz // 2)
        return khz

    def throttled(self, now: float) -> bool:
        return self.cur_khz(now) < self.max_khz

    def seconds_left(self, now: float) -> float:
        return max(0.0, self.window[0] - now) if self.window is not None else 0.0

    def _account(self, now: float) -> None:
        """Count the changes since the last call, as Linux's stats count transitions."""
        if self.window is not None and now >= self.window[0]:
            self.window = None
        khz = self.cur_khz(now)
        if khz != self._khz:
            self.frequency_transitions += 1
            self._khz = khz
        state = math.ceil(MAX_STATE * (self.max_khz - khz) / self.max_khz)
        if state != self.cooling_state:
            self.cooling_transitions += 1
            self.cooling_state = state

    def tree(self, now: float) -> dict[str, str]:
        """Every file of the stand-in, relative to its root, as sysfs would print it."""
        self._account(now)
        cpus = " ".join(str(i) for i in range(self.cpus))
        cur = str(self.cur_khz(now))
        return {
            f"{POLICY}/scaling_cur_freq": cur, f"{POLICY}/cpuinfo_cur_freq": cur,
            f"{POLICY}/scaling_min_freq": str(self.min_khz),
            f"{POLICY}/scaling_max_freq": str(self.max_khz),
            f"{POLICY}/cpuinfo_min_freq": str(self.min_khz),
            f"{POLICY}/cpuinfo_max_freq": str(self.max_khz),
            f"{POLICY}/scaling_governor": "performance",
            f"{POLICY}/scaling_available_governors": "performance",
            f"{POLICY}/scaling_driver": "benchfarm-virtual",
            f"{POLICY}/affected_cpus": cpus, f"{POLICY}/related_cpus": cpus,
            f"{POLICY}/stats/total_trans": str(self.frequency_transitions),
            f"{ZONE}/type": "cpu-thermal",
            f"{ZONE}/temp": str(round(self.temp_c * 10) * 100),      # m°C, 0.1 °C steps
            f"{ZONE}/trip_point_0_temp": str(round(self.trip_c * 1000)),
            f"{ZONE}/trip_point_0_type": "passive",
            f"{COOLING}/type": "cpufreq-cpu0",
            f"{COOLING}/max_state": str(MAX_STATE),
            f"{COOLING}/cur_state": str(self.cooling_state),
            f"{COOLING}/stats/total_trans": str(self.cooling_transitions),
        }

    def state(self, now: float) -> dict[str, Any]:
        """The model as the control socket's /sensors/<index> answers it."""
        return {"tempC": round(self.temp_c, 2), "powerMW": round(self.power_mw, 1),
                "curKHz": self.cur_khz(now), "minKHz": self.min_khz, "maxKHz": self.max_khz,
                "governor": "performance", "throttled": self.throttled(now),
                "throttleSecondsLeft": round(self.seconds_left(now), 2),
                "tripped": self.tripped, "tripC": self.trip_c,
                "coolingState": self.cooling_state,
                "coolingTransitions": self.cooling_transitions,
                "frequencyTransitions": self.frequency_transitions}


def changed_lines(tree: dict[str, str], sent: dict[str, str]) -> list[str]:
    """The `path value` lines of `tree` that differ from what the guest was last sent."""
    return [f"{path} {value}\n" for path, value in tree.items() if sent.get(path) != value]


# a board's run state as the sensors see it: "off", "running", "suspended" or "frozen" (a test
# hook stopped its QEMU on purpose: the duty cycle must not wake it), and its QEMU's PID
Status = Callable[[], tuple[str, int | None]]


class BoardSensors:
    """One board's sensor model, its feed into the guest and the real slowdown of a throttle."""

    def __init__(self, name: str, model: SensorModel, power: Any, socket_path: str,
                 status: Status) -> None:
        self.name = name
        self.model = model
        self.power = power            # a PowerModel of its own (its CPU-load sampling is ours)
        self.socket_path = socket_path
        self.status = status
        self.writer: asyncio.StreamWriter | None = None
        self.sent: dict[str, str] = {}
        self.duty: asyncio.Task | None = None
        self.duty_fraction: float | None = None
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()

    def start(self) -> None:
        self._spawn(self._run())

    def _spawn(self, coro: Any) -> asyncio.Task:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def powered_on(self) -> None:
        """QEMU has just started: connect to its sensors port (it listens within a moment)."""
        self._drop()
        self.model.booted()
        self._spawn(self._connect(attempts=100))
        self._wake.set()

    def powered_off(self) -> None:
        self._drop()
        if self.duty is not None:
            self.duty.cancel()
        self._wake.set()

    def throttle(self, seconds: float, khz: int) -> dict[str, Any]:
        self.model.throttle(time.monotonic(), seconds, khz)
        self._wake.set()
        return self.state()

    def state(self) -> dict[str, Any]:
        run, _ = self.status()
        return {"board": self.name, "power": run, "connected": self.writer is not None,
                "dutyCycle": self.duty_fraction, **self.model.state(time.monotonic()),
                "tree": self.model.tree(time.monotonic())}

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), TICK_SECONDS)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                await self._update()
            except Exception:   # the model must keep ticking whatever one update met
                log.exception("%s: sensor update failed", self.name)

    async def _update(self) -> None:
        run, pid = self.status()
        reading = self.power.read({"frozen": "running"}.get(run, run), pid, self.model.cpus)
        now = time.monotonic()
        self.model.step(now, sum(r["power_mW"] for r in reading["rails"].values()))
        if self.model.throttled(now) and pid is not None and run in ("running", "suspended") \
                and (self.duty is None or self.duty.done()):
            self.duty = self._spawn(self._duty_cycle(pid))
        if run == "off":
            return
        if self.writer is None:
            await self._connect(attempts=1)
        self._push()

    def _push(self, full: bool = False) -> None:
        if self.writer is None:
            return
        if full:
            self.sent = {}
        if self.writer.transport.get_write_buffer_size() > MAX_BACKLOG:
            return      # the guest reads nothing (no loop in its image): send later
        tree = self.model.tree(time.monotonic())
        lines = changed_lines(tree, self.sent)
        if full:
            lines.append("ready\n")     # the tree is whole: the guest's init starts its shell
        if lines:
            self.writer.write("".join(lines).encode())
            self.sent = tree

    async def _connect(self, attempts: int) -> None:
        for _ in range(attempts):
            if self.status()[0] == "off" or self.writer is not None:
                return
            try:
                reader, writer = await asyncio.open_unix_connection(self.socket_path)
                break
            except OSError:
                if attempts > 1:
                    await asyncio.sleep(0.05)
        else:
            return
        if self.writer is not None or self.status()[0] == "off":   # another attempt won
            writer.close()
            return
        self.writer = writer
        self._push(full=True)    # held by QEMU until the guest opens the port
        self._spawn(self._listen(reader, writer))

    async def _listen(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The guest says `hello` whenever it (re)opens the port: it gets the whole tree."""
        try:
            while line := await reader.readline():
                if line.strip() == b"hello" and self.writer is writer:
                    self._push(full=True)
        except (ConnectionError, OSError):
            pass
        finally:
            if self.writer is writer:
                self._drop()

    def _drop(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.writer, self.sent = None, {}

    async def _duty_cycle(self, pid: int) -> None:
        """While throttled, QEMU runs `cur/max` of each slice and is stopped the rest."""
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return
        stopped = False

        def alive() -> bool:
            run, now_pid = self.status()
            return now_pid == pid and run in ("running", "suspended")

        def send(sig: signal.Signals) -> None:
            signal.pidfd_send_signal(fd, sig)

        log.info("%s: throttled to %d kHz", self.name, self.model.cur_khz(time.monotonic()))
        try:
            while alive() and self.model.throttled(now := time.monotonic()):
                self.duty_fraction = self.model.cur_khz(now) / self.model.max_khz
                pause = SLICE_SECONDS * (1 - self.duty_fraction)
                if pause > 0.001:
                    send(signal.SIGSTOP)
                    stopped = True
                    await asyncio.sleep(pause)
                    if not alive():
                        break
                    send(signal.SIGCONT)
                    stopped = False
                await asyncio.sleep(SLICE_SECONDS - pause)
        except ProcessLookupError:
            stopped = False        # it is gone: nothing to wake
        finally:
            if stopped and alive():
                try:
                    send(signal.SIGCONT)
                except ProcessLookupError:
                    pass
            os.close(fd)
            self.duty_fraction = None
            self._wake.set()       # the end of the window goes to the guest at once
            log.info("%s: throttle over", self.name)
