"""What one step of a board session does on the board: a timed boot, the provenance probes, a suite.

The runner (`benchfarm.session`) decides which steps to run and checkpoints each; this module only
knows the board: labgrid drivers through `Board`, the suite's command with its timeout and
background load, the parser. A `guard` callback runs before every power operation so the runner
can check it still owns the place (its lease and its labgrid lock) before touching the board.
"""

from __future__ import annotations

import logging
import shlex
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from benchfarm.api.devicetype import DeviceType
from benchfarm.api.outcomes import Reason, RunFailure
from benchfarm.api.runs import SuiteSpec
from benchfarm.core.policy.trust import plan_digest
from benchfarm.core.statistics.results import SuiteRecord
from benchfarm.errors import BenchfarmError, BoardFault, DeployedBootFailed, RunError, SuiteFailure
from benchfarm.lab.board import OUTPUT_LIMIT, Board, SerialLog
from benchfarm.lab.rails import RailMonitor, monitor_for
from benchfarm.suites.base import Metric
from benchfarm.suites.registry import parse

log = logging.getLogger(__name__)


class Cancelled(BenchfarmError):
    reason = Reason.cancelled


def with_background(command: str, background: str | None) -> str:
    if not background:
        return command
    return (f"({background}) >/dev/null 2>&1 & BFBG=$!; sleep 1; {command}; BFRC=$?; "
            f"kill $BFBG 2>/dev/null; pkill -P $BFBG 2>/dev/null; wait $BFBG 2>/dev/null; "
            f"exit $BFRC")


@dataclass
class BootResult:
    events: dict[str, float]
    phases: dict[str, float]
    power_on_wall: float
    kernel_clock: dict[str, Any] | None = None     # KernelClock.as_dict(): printk fused in
    failed_attempts: list[str] = field(default_factory=list)   # "Reason: message" of each retried


class BoardSession:
    """Steps on one acquired place. Not thread-safe, except `stop()` from another thread."""

    def __init__(self, place: str, resources: dict[str, dict[str, Any]], device_type: DeviceType,
                 labgrid_session: Any, *, deadline: float, serial_log: SerialLog | None = None,
                 environment: dict[str, str] | None = None,
                 guard: Callable[[], None] | None = None,
                 output_limit: int = OUTPUT_LIMIT,
                 labgrid_variables: Mapping[str, str] | None = None) -> None:
        """`output_limit`: the bytes of a command's output kept for parsing and upload (its
        head and its tail; `serial_log` has every byte); `labgrid_variables`: as for `Board`."""
        self.place = place
        self.resources = resources
        self.device_type = device_type
        self.deadline = deadline             # monotonic: the run's timeout
        self.environment = environment or {}
        self.guard = guard or (lambda: None)
        self.cancelled = threading.Event()
        self.board = Board(place, resources, device_type, labgrid_session, serial_log,
                           output_limit, labgrid_variables=labgrid_variables)
        self.monitor: RailMonitor | None = None   # built by the first low-power step

    def stop(self) -> None:
        """Cancel from another thread: wake a blocked console read at once."""
        self.cancelled.set()
        try:
            self.board.console.serial.close()
        except Exception:  # the port may not be open yet, or not be a serial port
            log.debug("closing the console of %s to cancel failed", self.place, exc_info=True)

    def check(self) -> None:
        if self.cancelled.is_set():
            raise Cancelled("run cancelled")
        if time.monotonic() > self.deadline:
            raise RunError("the run's timeoutSeconds ran out", reason=RunFailure.run_timeout)

    def _remaining(self, wanted: float) -> float:
        return max(1.0, min(wanted, self.deadline - time.monotonic()))

    # -- steps --------------------------------------------------------------------------------
    def boot(self) -> BootResult:
        """A timed power cycle to the shell. A boot that fails on the board's side is tried
        again, up to the device type's `boot.retries` times; the board is charged only when the
        last attempt fails too, and that error names the earlier ones."""
        dt = self.device_type
        failed: list[str] = []
        while True:
            self.check()
            self.guard()
            try:
                timeline = self.board.boot(self._remaining(dt.boot.timeoutSeconds))
                break
            except BoardFault as exc:
                failed.append(f"{exc.reason}: {exc}")
                if isinstance(exc, DeployedBootFailed):   # the same software would fail again
                    raise
                if len(failed) > dt.boot.retries or self.cancelled.is_set():
                    if len(failed) == 1:
                        raise
                    raise BoardFault(f"{exc} (boot attempt {len(failed)} of {len(failed)}; "
                                     f"earlier: {'; '.join(failed[:-1])})"[:1000],
                                     reason=exc.reason) from exc
                log.warning("%s: boot attempt %d failed (%s); power-cycling it again (%d of %d "
                            "retries)", self.place, len(failed), failed[-1], len(failed),
                            dt.boot.retries)
        return BootResult(dict(timeline.events), timeline.phases(dt.boot.phases),
                          self.board.last_power_on_wall or time.time(),
                          timeline.kernel.as_dict() if timeline.kernel else None, failed)

    def provenance(self, suites: list[SuiteSpec]) -> dict[str, Any]:
        probes = {
            "uname": "uname -a",
            "kernelRelease": "uname -r",
            "cmdline": "cat /proc/cmdline",
            "governor": "cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null "
                        "|| echo none",
            "cpus": "grep -c ^processor /proc/cpuinfo",
        }
        prov: dict[str, Any] = {"board": self.place, "deviceType": self.device_type.name,
                                "planDigest": plan_digest(suites)}
        self.check()
        # one round trip on the console for all probes (each command costs a prompt cycle)
        sep = "@@benchfarm-provenance@@"
        out = self.board.run(f"; echo {sep}; ".join(probes.values()),
                             timeout=self._remaining(20)).output
        parts = out.split(sep)
        for i, key in enumerate(probes):
            prov[key] = (parts[i] if i < len(parts) else "").strip()[:512]
        return prov

    def suite(self, spec: SuiteSpec, iteration: int, warmup: bool,
              parse: Callable[[str, str, dict[str, str]], list[Metric]] = parse
              ) -> tuple[SuiteRecord, str, dict[str, Any]]:
        """Run one suite once: the record (metrics or error), its raw output, and evidence.
        `parse`: the suite's parser (the session's runs in a child with a budget,
        `session.parsing`); a RunError it raises (the output over its budget) ends the run."""
        self.check()
        if spec.suite == "low-power":
            return self._low_power(spec, iteration, warmup)
        cmd = with_background(spec.command, spec.background)
        if self.environment:  # each command runs in its own `sh -c`: pass the lab's values
            cmd = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.environment.items()) \
                + f" sh -c {shlex.quote(cmd)}"
        r = self.board.run(cmd, timeout=self._remaining(spec.timeoutSeconds))
        record = SuiteRecord(step=spec.name, suite=spec.suite, iteration=iteration, warmup=warmup,
                             exit_code=r.exit_code, seconds=r.seconds)
        if r.timed_out:
            record.error = f"timed out after {spec.timeoutSeconds} s"
        elif r.exit_code != 0:
            tail = r.output.strip().splitlines()[-1:] or [""]
            record.error = f"exit code {r.exit_code}: {tail[0][:160]}"
        else:
            try:
                record.metrics = parse(spec.suite, r.output, dict(spec.parameters))
            except RunError:
                raise
            except BenchfarmError as exc:
                record.error = exc.message
        return record, r.output, {}

    def _low_power(self, spec: SuiteSpec, iteration: int, warmup: bool
                   ) -> tuple[SuiteRecord, str, dict[str, Any]]:
        from benchfarm.lab.lowpower import run_low_power
        start = time.monotonic()
        record = SuiteRecord(step=spec.name, suite=spec.suite, iteration=iteration, warmup=warmup,
                             exit_code=None, seconds=0.0)
        evidence: dict[str, Any] = {}
        try:
            if self.monitor is None:  # its drivers live on the board's target: build it once
                self.monitor = monitor_for(self.device_type, self.resources, self.board.target)
            lp = run_low_power(self.board, self.monitor, self.device_type, spec)
            record.metrics, record.exit_code = lp.metrics, 0
            output, evidence = lp.output, lp.evidence
        except SuiteFailure as exc:
            record.error = exc.message
            output = exc.message
        record.seconds = time.monotonic() - start
        return record, output, evidence

    # -- the end ------------------------------------------------------------------------------
    def power_off(self) -> None:
        self.guard()
        self.board.power_off()

    def close(self) -> None:
        self.board.close()

    def power_off_and_close(self, passes: tuple[type[BaseException], ...] = ()) -> None:
        """The end of every session: the board off, the console closed, whatever happens; a
        failed power-off is logged, only `passes` (the caller's own stop signals) propagate."""
        try:
            self.cancelled.clear()
            self.power_off()
        except passes:
            raise
        except Exception as exc:   # labgrid's power drivers raise their own: said, then closed
            log.warning("power off of %s failed: %s", self.place, exc, exc_info=True)
        finally:
            self.close()
