"""The low-power suite: put the board into a mode over its console, sample every rail, wake it.

Sequence: sample the rails while the board idles at its prompt (the active baseline), send the
mode's command (e.g. `rtcwake -m mem -s 10`), keep sampling through a window inside the sleep,
wait for the shell to come back (the RTC alarm wakes it, or a byte on the console for modes that
wake by serial), and check the evidence that it really slept: the kernel's suspend entry and exit
lines and, from a state-aware monitor, the state it reported. A board that never wakes is an
infrastructure error: the session powers it off and the run says so.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from benchfarm.api.devicetype import DeviceType
from benchfarm.api.outcomes import BoardFaultKind, LabFault
from benchfarm.api.runs import SuiteSpec
from benchfarm.core.readings import power
from benchfarm.errors import BoardFault, InfraError, SuiteFailure
from benchfarm.lab.board import Board
from benchfarm.lab.rails import RailMonitor, Sampler, VirtualRailMonitor
from benchfarm.suites.base import Metric


@dataclass
class LowPowerResult:
    metrics: list[Metric]
    output: str
    evidence: dict[str, Any] = field(default_factory=dict)


def _param(spec: SuiteSpec, key: str, default: float) -> float:
    try:
        return float(spec.parameters.get(key, default))
    except ValueError as exc:
        raise SuiteFailure(f"low-power: parameter {key} must be a number") from exc


def run_low_power(board: Board, monitor: RailMonitor, dtype: DeviceType, spec: SuiteSpec
                  ) -> LowPowerResult:
    mode_name = spec.parameters.get("mode", "")
    mode = dtype.mode(mode_name)
    if mode is None:
        raise SuiteFailure(f"low-power: device type {dtype.name} has no mode {mode_name!r} "
                           f"(has: {', '.join(m.name for m in dtype.lowPowerModes) or 'none'})")
    sleep_s = _param(spec, "sleepSeconds", 10)
    settle = _param(spec, "settleSeconds", 2)
    window_s = _param(spec, "windowSeconds", min(5.0, max(1.0, sleep_s - settle - 1)))
    active_s = _param(spec, "activeSeconds", 3)
    rails = [r.name for r in dtype.rails]

    sampler = Sampler(monitor, _param(spec, "rateHz", 10)).start()
    try:
        t_active = time.monotonic()
        time.sleep(active_s)
        t_active_end = time.monotonic()
        log_offset = board.serial_log.size
        t_cmd = time.monotonic()
        waker = None
        if mode.wake == "serial":
            waker = threading.Timer(settle + window_s + 0.5, lambda: board.console.write(b"\n"))
            waker.start()
        wake_timeout = sleep_s + settle + window_s + _param(spec, "wakeTimeoutSeconds", 60)
        try:
            result = board.run(mode.command.format(seconds=int(sleep_s)), timeout=wake_timeout)
        except InfraError as exc:  # the shell never came back
            raise BoardFault(f"{board.place} did not wake from {mode.name} within "
                             f"{wake_timeout:.0f} s ({exc})", reason=BoardFaultKind.wake_failed) from exc
        t_back = time.monotonic()
        if waker is not None:
            waker.cancel()
    finally:
        sampler.stop()
    if result.timed_out:
        raise BoardFault(f"{board.place} did not wake from {mode.name} within "
                         f"{wake_timeout:.0f} s", reason=BoardFaultKind.wake_failed)
    try:  # a board can also hang just after it resumed: that is a failed wake too
        alive = board.run("echo benchfarm-awake", timeout=30)
    except InfraError as exc:
        raise BoardFault(f"{board.place} did not wake from {mode.name}: its shell was lost right "
                         f"after resuming ({exc})", reason=BoardFaultKind.wake_failed) from exc
    if alive.timed_out or "benchfarm-awake" not in alive.output:
        raise BoardFault(f"{board.place} did not wake from {mode.name}: no shell after resuming",
                         reason=BoardFaultKind.wake_failed)
    if sampler.error is not None and not sampler.readings:
        raise InfraError(f"rail monitor failed: {sampler.error}", reason=LabFault.monitor_failed)

    console = board.serial_log.since(log_offset).decode("utf-8", errors="replace")
    evidence: dict[str, Any] = {
        "mode": mode.name, "exitCode": result.exit_code,
        "kernelEnter": bool(re.search(mode.enterPattern, console)),
        "kernelExit": bool(re.search(mode.exitPattern, console)),
        "statesSeen": sorted({s for t, s in sampler.states if s and t_cmd <= t <= t_back}),
        "samples": len(sampler.readings),
    }
    if isinstance(monitor, VirtualRailMonitor):
        qmp = monitor.qmp()
        evidence["qmpEvents"] = [e["event"] for e in qmp.get("events", [])
                                 if e.get("at", 0) >= time.time() - (time.monotonic() - t_cmd)]

    asleep = [r for r, (t, s) in zip(sampler.readings, sampler.states, strict=False)
              if t_cmd <= t <= t_back and mode.expectState and s == mode.expectState]
    if not asleep:  # a monitor that does not know the board's state: use the time window
        start = t_cmd + settle
        asleep = power.window(sampler.readings, start, min(start + window_s, t_back - 0.5))
    active = power.window(sampler.readings, t_active + 0.5, t_active_end)
    problems = []
    if not (evidence["kernelEnter"] and evidence["kernelExit"]):
        problems.append("the kernel did not log suspend entry and exit")
    if mode.expectState and evidence["statesSeen"] and mode.expectState not in evidence["statesSeen"]:
        problems.append(f"the monitor never saw the board {mode.expectState}")
    if not asleep or not active:
        problems.append("no rail readings in the measurement windows")
    if problems:
        raise SuiteFailure(f"low-power {mode.name}: " + "; ".join(problems))

    active_sum = power.summarize_rails(active, rails)
    asleep_sum = power.summarize_rails(asleep, rails)
    lines = [f"mode {mode.name}: {len(asleep)} samples asleep, {len(active)} active",
             f"evidence: {evidence}", "", f"{'rail':20} {'V':>6} {'active mW':>10} "
             f"{mode.name + ' mW':>14} {'min':>9} {'max':>9}"]
    for a, s in zip(active_sum, asleep_sum, strict=False):
        lines.append(f"{s.rail:20} {s.voltage:6.2f} {a.mean_mw:10.3f} {s.mean_mw:14.3f} "
                     f"{s.min_mw:9.3f} {s.max_mw:9.3f}")
    lines.append(f"{'Total':20} {'':6} {power.total(active_sum):10.3f} {power.total(asleep_sum):14.3f}")
    return LowPowerResult(power.metrics("active", active_sum) + power.metrics(mode.name, asleep_sum),
                          "\n".join(lines) + "\n", evidence)
