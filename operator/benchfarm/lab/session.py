"""What one step of a board session does on the board: a timed boot, the provenance probes, a suite.

The runner (`benchfarm.session`) decides which steps to run and checkpoints each; this module only
knows the board: labgrid drivers through `Board`, the suite's command with its timeout and
background load, the parser. A `guard` callback runs before every power operation so the runner
can check it still owns the place (its lease and its labgrid lock) before touching the board.

Around a suite it records what the board was measured under (api.conditions): on a device type
with `conditions`, the suite's command goes out wrapped in the probe (`core.readings.conditions`:
one console command, no extra prompt cycle), and with a bounded envelope the step first waits
for the board to be inside it (cool, idle, at its governor and frequency); on one with rails and
a power monitor, the rails are sampled through the step and its energy becomes metrics. A
monitor that fails is the lab's, never the step's: the step has no power then, and the log says
why.
"""

from __future__ import annotations

import logging
import shlex
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from benchfarm.api.conditions import Envelope, Snapshot, StepConditions, StepPower
from benchfarm.api.devicetype import DeviceType
from benchfarm.api.outcomes import Reason, RunFailure
from benchfarm.api.runs import SuiteSpec
from benchfarm.core.policy.trust import plan_digest
from benchfarm.core.readings import conditions as probe, envelope as verdict, power
from benchfarm.core.statistics.results import HEADLINE, SuiteRecord
from benchfarm.errors import BenchfarmError, BoardFault, DeployedBootFailed, RunError, SuiteFailure
from benchfarm.lab.board import OUTPUT_LIMIT, Board, CommandResult, SerialLog
from benchfarm.lab.rails import RailMonitor, Sampler, monitor_for
from benchfarm.suites.base import Metric
from benchfarm.suites.registry import parse

log = logging.getLogger(__name__)
POLL_SECONDS = 1.0     # between two snapshots while waiting for the envelope before a step
# a step's own last snapshot this recent speaks for the board before the next step, when the
# board was last seen idle before a step: the next one then takes no snapshot of its own to
# wait on, and its wrapped command's before snapshot (busy since that one) is judged with it
FRESH_SECONDS = 10.0
PROBE_TRIES = 3        # installs of the conditions probe a boot (a suite may empty /tmp)


class Cancelled(BenchfarmError):
    reason = Reason.cancelled


@dataclass(frozen=True)
class Seen:
    """The board's latest snapshot, when it was read (monotonic), and whether the board was
    idle before the step that read it."""

    snapshot: Snapshot
    at: float
    idle: bool


def headline_of(record: SuiteRecord) -> Metric | None:
    """The record's headline metric (as `core.statistics.results.headline` picks a step's)."""
    wanted = HEADLINE.get(record.suite)
    return next((m for m in record.metrics if m.name == wanted),
                record.metrics[0] if record.metrics else None)


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
        self.monitor: RailMonitor | None = None   # built by the first step that samples rails
        self.monitor_problem: str | None = None   # why it could not be built (said once)
        self.last_mark: probe.Mark | None = None  # the board's latest snapshot, for `busy`
        self.last_seen: Seen | None = None        # and what it said, for the next step's wait
        self.probe_ready = False                  # the probe's functions on the board (a boot)
        self.probe_tries = 0                      # installs tried since the boot

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
            # /tmp and the counters start over
            self.probe_ready, self.probe_tries, self.last_mark = False, 0, None
            self.last_seen = None
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
        # one round trip on the console for all probes (each command costs a prompt cycle);
        # where conditions are recorded, it ends with the mark the first snapshot's busy is
        # counted from
        commands = list(probes.values()) + ([probe.mark()] if self.device_type.conditions
                                            else [])
        sep = "@@benchfarm-provenance@@"
        sent = time.time()
        out = self.board.run(f"; echo {sep}; ".join(commands), timeout=self._remaining(20)).output
        parts = out.split(sep)
        for i, key in enumerate(probes):
            prov[key] = (parts[i] if i < len(parts) else "").strip()[:512]
        if self.device_type.conditions and len(parts) > len(probes):
            _, mark = probe.read_probe(parts[len(probes)], sent, time.time(), self.last_mark)
            self.last_mark = mark or self.last_mark
        return prov

    def suite(self, spec: SuiteSpec, iteration: int, warmup: bool,
              parse: Callable[[str, str, dict[str, str]], list[Metric]] = parse,
              envelope: Envelope | None = None, retake: int = 0
              ) -> tuple[SuiteRecord, str, dict[str, Any]]:
        """Run one suite once: the record (metrics or error, and what it was measured under:
        `record.conditions`, not yet judged), its raw output, and evidence. `parse`: the suite's
        parser (the session's runs in a child with a budget, `session.parsing`); a RunError it
        raises (the output over its budget) ends the run. `envelope`: what the step waits for
        before it starts; `retake`: which measurement of its iteration this is."""
        self.check()
        if spec.suite == "low-power":
            return self._low_power(spec, iteration, warmup)
        source = self.device_type.conditions
        waited = self._wait_for(envelope, retake) \
            if source is not None and envelope is not None else 0.0
        cmd = with_background(spec.command, spec.background)
        if self.environment:  # each command runs in its own `sh -c`: pass the lab's values
            cmd = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.environment.items()) \
                + f" sh -c {shlex.quote(cmd)}"
        if source is not None:
            installed = self._install_probe()       # (no wait before: its snapshot unused)
            if installed is not None:
                self.last_mark = installed[1] or self.last_mark
            cmd, markers = probe.wrap(cmd, source)
        sent, start = time.time(), time.monotonic()   # before the sampler's first reading
        sampler = self._sampler()
        try:
            r = self.board.run(cmd, timeout=self._remaining(spec.timeoutSeconds))
        finally:
            step_power = self._power(sampler, start)
        conditions = None
        if source is not None:
            unwrapped = probe.unwrap(r.output, markers, sent, time.time(), self.last_mark)
            self.last_mark = unwrapped.last or self.last_mark
            self.probe_ready = unwrapped.before is not None   # gone (/tmp emptied): again
            latest = unwrapped.after or next(reversed(unwrapped.during), None)
            self._saw(latest, unwrapped.before, envelope)
            r = CommandResult(r.command, unwrapped.output, r.exit_code, r.seconds, r.timed_out)
            conditions = StepConditions(before=unwrapped.before, during=unwrapped.during,
                                        after=unwrapped.after, simulated=source.simulated)
        if step_power is not None:
            conditions = conditions or StepConditions()
            conditions.power = step_power
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
        if step_power is not None and record.ok:
            record.metrics += power.energy_metrics(step_power, headline_of(record))
        if conditions is not None:
            conditions.waitedSeconds, conditions.retake = round(waited, 3), retake
            record.conditions = conditions.model_dump(mode="json")
        return record, r.output, {}

    # -- what the board is measured under -------------------------------------------------------
    def _install_probe(self) -> tuple[Snapshot, probe.Mark | None] | None:
        """The probe's functions written to the board, once a boot (one console command), and
        the snapshot it printed with its mark (None: none, or nothing to install). One that
        does not take is said: the steps then run unwrapped, with no conditions."""
        source = self.device_type.conditions
        if self.probe_ready or source is None or self.probe_tries >= PROBE_TRIES:
            return None
        self.probe_tries += 1
        self.check()
        sent = time.time()
        r = self.board.run(probe.install(source), timeout=self._remaining(20))
        if r.exit_code != 0:
            log.warning("%s: the conditions probe could not be written to the board (%s): %s",
                        self.place, probe.script_path(source), r.output[-200:])
            return None
        self.probe_ready = True
        # its snapshot: a look of its own (`_snapshot`), or the reference of the next one's busy
        snap, mark = probe.read_probe(r.output, sent, time.time(), self.last_mark)
        return None if snap is None else (snap, mark)

    def _saw(self, last: Snapshot | None, before: Snapshot | None,
             envelope: Envelope | None) -> None:
        """What a step's wrapped command said: its last snapshot, and whether the board was
        idle before it (its before snapshot's busy within the envelope's bound)."""
        if last is None:
            self.last_seen = None
            return
        bound = envelope.maxBusyBefore if envelope is not None else None
        idle = bound is None or (before is not None and before.busy is not None
                                 and before.busy <= bound)
        self.last_seen = Seen(last, time.monotonic(), idle)

    def _still_inside(self, envelope: Envelope) -> bool:
        """Whether the board's latest word is enough to start a step on: fresh, the board idle
        before the last step, and its last snapshot inside the envelope (busy aside: the step's
        own before snapshot says it, judged with the step)."""
        seen = self.last_seen
        if seen is None or not seen.idle or time.monotonic() - seen.at > FRESH_SECONDS:
            return False
        return not verdict.before_problems(envelope, seen.snapshot.model_copy(
            update={"busy": None}))

    def _snapshot(self) -> tuple[Snapshot | None, probe.Mark | None]:
        """The board's conditions now (its busy since `last_mark`), and its mark: one console
        round trip, none where the probe was written to the board just now (the snapshot its
        install printed)."""
        assert self.device_type.conditions is not None
        installed = self._install_probe()
        if installed is not None:
            return installed
        sent = time.time()
        out = self.board.run(probe.probe(self.device_type.conditions),
                             timeout=self._remaining(20)).output
        return probe.read_probe(out, sent, time.time(), self.last_mark)

    def _wait_for(self, envelope: Envelope, retake: int = 0) -> float:
        """Before a step: poll the board's conditions a second apart until they are inside
        `envelope`'s before-bounds (temperature, busy, governor, frequency), at most its
        waitSeconds (then the step runs anyway and is judged), then its settleSeconds more.
        A first measurement on a board whose latest word is still inside takes no snapshot
        (`_still_inside`); a retake always looks. The snapshot that finds the board inside is
        no reference for busy: the step's own before snapshot counts it from the one before,
        over the whole quiet stretch, not over the few ticks between the two. The seconds it
        waited."""
        wait, settle = envelope.waitSeconds or 0.0, envelope.settleSeconds or 0.0
        if not envelope.bounded or (wait <= 0 and settle <= 0):
            return 0.0
        start = time.monotonic()
        if retake == 0 and self._still_inside(envelope):
            wait = 0.0
        while wait > 0:
            self.check()
            snap, mark = self._snapshot()
            if snap is None:       # nothing to wait on: the step says what it can, judged
                self.probe_ready = False
                break
            problems = verdict.before_problems(envelope, snap)
            if snap.busy is None and envelope.maxBusyBefore is not None:
                problems.append("busy not known yet")   # no reference: the next one has
            left = wait - (time.monotonic() - start)
            if not problems:
                break
            self.last_mark = mark or self.last_mark
            if left <= 0:
                log.info("%s: still outside the envelope after %.0f s (%s); measuring anyway",
                         self.place, wait, "; ".join(problems))
                break
            self.cancelled.wait(min(POLL_SECONDS, left))
        if settle > 0:
            self.check()
            self.cancelled.wait(settle)
        return time.monotonic() - start

    def _sampler(self) -> Sampler | None:
        """The rails sampled through a step, when the device type has them and a monitor (built
        once per session; one that cannot be built is said once, and no step samples)."""
        dt = self.device_type
        if not dt.rails or dt.powerMonitor is None or self.monitor_problem is not None:
            return None
        if self.monitor is None:
            try:
                self.monitor = monitor_for(dt, self.resources, self.board.target)
            except Exception as exc:   # the lab's instrument, not the run: no power recorded
                self.monitor_problem = f"{type(exc).__name__}: {exc}"
                log.warning("%s: rails not sampled in this session: %s", self.place,
                            self.monitor_problem, exc_info=True)
                return None
        rate = dt.conditions.powerSampleHz if dt.conditions is not None else 2.0
        return Sampler(self.monitor, rate).start()

    def _power(self, sampler: Sampler | None, start: float) -> StepPower | None:
        """The step's power from `start` to now: its sampler stopped (a short step's last
        reading taken as it stops, so it has a span)."""
        if sampler is None:
            return None
        sampler.stop()
        end = time.monotonic()
        step = power.step_power(sampler.readings, start, end, time.time() - end)
        if sampler.error is not None or step is None:
            log.warning("%s: the rail monitor failed during the step (%s); its power is not "
                        "recorded", self.place, sampler.error or "no reading")
            return None
        return step

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
