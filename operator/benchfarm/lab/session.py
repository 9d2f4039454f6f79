"""A board session: everything a run does between acquiring its place and releasing it.

Power-cycle and time `bootCycles` boots, record what was measured (provenance), run each suite of
the plan per iteration with its own timeout and optional background load, parse as we go, and
always power off and release. It is plain blocking code behind the `Executor` interface (a thread
here; a Kubernetes Job per run in a large lab), reporting progress through a callback so the
operator can checkpoint the run's status.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shlex
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..api.devicetype import DeviceType
from ..api.models import SuiteSpec
from ..core.boot import BootTimeline
from ..core.results import SuiteRecord
from ..errors import BenchfarmError, InfraError, SuiteFailure
from ..suites.registry import parse
from .board import Board, SerialLog
from .coordinator import Coordinator

log = logging.getLogger(__name__)


class Cancelled(BenchfarmError):
    reason = "Cancelled"


@dataclass
class SessionRequest:
    run_key: str
    place: str
    device_type: DeviceType
    suites: list[SuiteSpec]
    iterations: int
    warmup_iterations: int
    boot_cycles: int
    deadline: float                       # monotonic; the run's timeout from acquisition
    environment: dict[str, str] = field(default_factory=dict)


@dataclass
class SessionResult:
    boots: list[dict[str, float]] = field(default_factory=list)
    boot_events: list[dict[str, float]] = field(default_factory=list)
    records: list[SuiteRecord] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)
    serial_log: bytes = b""
    outputs: dict[str, str] = field(default_factory=dict)   # artifact name -> raw output
    evidence: dict[str, Any] = field(default_factory=dict)  # e.g. low-power: proof of sleep
    power_on_times: list[float] = field(default_factory=list)  # wall clock, for latency figures


ProgressFn = Callable[[str, dict[str, Any]], None]
OutputFn = Callable[[str, str], str | None]   # (artifact name, text) -> URL


def plan_digest(suites: list[SuiteSpec]) -> str:
    body = json.dumps([s.model_dump() for s in suites], sort_keys=True)
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def with_background(command: str, background: str | None) -> str:
    if not background:
        return command
    return (f"({background}) >/dev/null 2>&1 & BFBG=$!; sleep 1; {command}; BFRC=$?; "
            f"kill $BFBG 2>/dev/null; pkill -P $BFBG 2>/dev/null; wait $BFBG 2>/dev/null; "
            f"exit $BFRC")


class BoardSession:
    """Runs one request on one place. `fence()` from another thread stops it touching the board."""

    def __init__(self, coordinator: Coordinator, request: SessionRequest,
                 progress: ProgressFn, on_output: OutputFn | None = None) -> None:
        self.coordinator = coordinator
        self.request = request
        self.progress = progress
        self.on_output = on_output
        self.cancelled = threading.Event()
        self.fenced = threading.Event()
        self.board: Board | None = None
        self.serial_log = SerialLog()

    def fence(self) -> None:
        """Cancel, and from now on never touch the board (someone else may own it soon)."""
        self.cancelled.set()
        self.fenced.set()
        board = self.board
        if board is not None:
            try:  # wake a blocked read at once
                board.serial.serial.close()
            except Exception:
                pass

    def _check(self) -> None:
        if self.cancelled.is_set():
            raise Cancelled("run cancelled")
        if time.monotonic() > self.request.deadline:
            raise InfraError("run timed out (timeoutSeconds from board acquisition)",
                             reason="RunTimeout")

    def _remaining(self, wanted: float) -> float:
        return max(1.0, min(wanted, self.request.deadline - time.monotonic()))

    def run(self) -> SessionResult:
        req = self.request
        result = SessionResult()
        self.coordinator.acquire(req.place)
        self.progress("Acquired", {"progress": "board acquired"})
        try:
            places = self.coordinator.places()
            place = places.get(req.place)
            if place is None:
                raise InfraError(f"place {req.place} vanished", reason="PlaceMissing")
            self.board = Board(req.place, place.resources, req.device_type, self.serial_log)
            self._boots(result)
            self._provenance(result)
            self._suites(result)
            return result
        finally:
            result.serial_log = self.serial_log.bytes()
            self._teardown()

    def _boots(self, result: SessionResult) -> None:
        req = self.request
        dt = req.device_type
        for cycle in range(1, req.boot_cycles + 1):
            self._check()
            self.progress("Booting", {"progress": f"boot {cycle}/{req.boot_cycles}"})
            timeline: BootTimeline = self.board.boot(self._remaining(dt.boot.timeoutSeconds))
            result.boot_events.append(dict(timeline.events))
            result.power_on_times.append(self.board.last_power_on_wall or time.time())
            result.boots.append(timeline.phases(dt.boot.phases))
            log.info("%s: boot %d/%d on %s: %s", req.run_key, cycle, req.boot_cycles, req.place,
                     result.boots[-1])
            self.progress("Booted", {"boots": list(result.boots)})

    def _provenance(self, result: SessionResult) -> None:
        req = self.request
        probes = {
            "uname": "uname -a",
            "cmdline": "cat /proc/cmdline",
            "governor": "cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null "
                        "|| echo none",
            "cpus": "grep -c ^processor /proc/cpuinfo",
        }
        prov: dict[str, Any] = {"board": req.place, "deviceType": req.device_type.name,
                                "planDigest": plan_digest(req.suites)}
        for key, cmd in probes.items():
            self._check()
            r = self.board.run(cmd, timeout=self._remaining(20))
            prov[key] = r.output.strip()[:512]
        result.provenance = prov

    def _suites(self, result: SessionResult) -> None:
        req = self.request
        total_iter = req.warmup_iterations + req.iterations
        for it in range(1, total_iter + 1):
            warm = it <= req.warmup_iterations
            for index, spec in enumerate(req.suites, 1):
                self._check()
                label = f"iteration {it}/{total_iter}{' (warm-up)' if warm else ''}, " \
                        f"suite {index}/{len(req.suites)} {spec.name}"
                self.progress("Running", {"progress": label})
                if spec.suite == "low-power":
                    result.records.append(self._low_power(spec, it, warm, result))
                    self.progress("SuiteDone", {"records": len(result.records)})
                    continue
                cmd = with_background(spec.command, spec.background)
                if req.environment:  # each command runs in its own `sh -c`: pass the lab's values
                    cmd = " ".join(f"{k}={shlex.quote(v)}" for k, v in req.environment.items()) \
                        + f" sh -c {shlex.quote(cmd)}"
                r = self.board.run(cmd, timeout=self._remaining(spec.timeoutSeconds))
                record = SuiteRecord(step=spec.name, suite=spec.suite, iteration=it, warmup=warm,
                                     exit_code=r.exit_code, seconds=r.seconds)
                name = f"raw/{spec.name}/iteration-{it:03d}.txt"
                result.outputs[name] = r.output
                if self.on_output is not None:
                    record.artifact = self.on_output(name, r.output)
                if r.timed_out:
                    record.error = f"timed out after {spec.timeoutSeconds} s"
                elif r.exit_code != 0:
                    tail = r.output.strip().splitlines()[-1:] or [""]
                    record.error = f"exit code {r.exit_code}: {tail[0][:160]}"
                else:
                    try:
                        record.metrics = parse(spec.suite, r.output, dict(spec.parameters))
                    except BenchfarmError as exc:
                        record.error = exc.message
                result.records.append(record)
                self.progress("SuiteDone", {"records": len(result.records)})

    def _low_power(self, spec: SuiteSpec, it: int, warm: bool, result: SessionResult) -> SuiteRecord:
        from .lowpower import run_low_power
        from .rails import monitor_for
        req = self.request
        start = time.monotonic()
        record = SuiteRecord(step=spec.name, suite=spec.suite, iteration=it, warmup=warm,
                             exit_code=None, seconds=0.0)
        try:
            place = self.coordinator.places()[req.place]
            monitor = monitor_for(req.device_type, place.resources, self.board.target)
            lp = run_low_power(self.board, monitor, req.device_type, spec)
            record.metrics, record.exit_code = lp.metrics, 0
            output = lp.output
            result.evidence[f"{spec.name}/{it}"] = lp.evidence
        except SuiteFailure as exc:
            record.error = exc.message
            output = exc.message
        record.seconds = time.monotonic() - start
        name = f"raw/{spec.name}/iteration-{it:03d}.txt"
        result.outputs[name] = output
        if self.on_output is not None:
            record.artifact = self.on_output(name, output)
        return record

    def _teardown(self) -> None:
        board = self.board
        if self.fenced.is_set():
            return  # whoever fenced us has powered off and released the place
        try:
            if board is not None:
                board.power_off()
        except Exception:
            log.warning("%s: power off failed", self.request.place, exc_info=True)
        finally:
            if board is not None:
                board.close()
            try:
                self.coordinator.release(self.request.place)
            except Exception:
                log.warning("%s: release failed", self.request.place, exc_info=True)


class Executor(Protocol):
    """Where board sessions run: threads here, a Kubernetes Job per run in a large lab."""

    def submit(self, fn: Callable[[], Any]) -> Future: ...

    def shutdown(self) -> None: ...


class ThreadExecutor:
    def __init__(self, max_sessions: int = 64) -> None:
        self.pool = ThreadPoolExecutor(max_workers=max_sessions, thread_name_prefix="session")

    def submit(self, fn: Callable[[], Any]) -> Future:
        return self.pool.submit(fn)

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
