"""`benchfarm session run NS/NAME`: one board session as its own process, resumable at any step.

The operator schedules a run (status: Running, board, attempt) and launches this; from then on the
runner owns the board. It proves it is alive with a Lease of its run, acquires the place under the
run's own labgrid identity, and runs the session's steps (core.steps). Every finished step goes to
the spool and MinIO (store.spool) before the next one starts, so a runner that is killed and
launched again resumes at the first unfinished step: it power-cycles the board, whose state is
unknown, and never redoes a finished step. Results and reports are built from the checkpoints.

Who is to blame decides what happens (errors.py): an outage of the API server, MinIO or the labgrid
coordinator is waited out, bounded by the run's timeout; a board fault ends the session with
`status.sessionEnd` so the operator can charge the board and move the run; a place someone else
took is left alone. Before every power operation the runner checks it still holds its Lease and
the place; a runner whose Lease was taken over stops touching the board at once.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from kubernetes.client.rest import ApiException

from ..api.devicetype import DeviceType
from ..api.models import BenchmarkRunSpec, LabPolicySpec, SuiteSpec
from ..core import steps as st
from ..core.conditions import now_iso, set_condition
from ..core.repeat import decide
from ..core.stats import seed_format
from ..errors import BoardBusy, BoardFault, InfraError, Outage, RunError
from ..kubeapi.client import Kube
from ..kubeapi.leases import SESSION_LEASE_LABEL, LeaseHolder, LeaseLost, session_lease_name
from ..lab.board import SerialLog
from ..lab.coordinator import Coordinator, run_identity
from ..lab.environment import load_device_types
from ..lab.session import BoardSession, Cancelled
from ..store.artifacts import ArtifactStore, StoreConfig
from ..store.software import Fetched, SoftwareCache
from ..store.spool import Spool

log = logging.getLogger("benchfarm.session")
T = TypeVar("T")

RUNNING, SUCCEEDED, FAILED, CANCELLED = "Running", "Succeeded", "Failed", "Cancelled"
STATUS_EVERY = 15.0         # seconds: progress writes are coalesced to at most one per period,
STATUS_SHARE = 0.125        # which grows with the session's age (a 6-hour soak: ~50 writes)
CONSOLE_RECOVERIES = 2      # power-cycles to get a lost console back before it is a board fault


@dataclass
class Config:
    coordinator: str
    device_types: Path
    spool: Path
    environment: dict[str, str]
    software_cache: Path = Path("/tmp/benchfarm/software")
    lease_seconds: int = 15
    renew_seconds: float = 3.0

    @classmethod
    def from_env(cls) -> Config:
        env = {}
        peer = os.environ.get("BENCHFARM_IPERF3_PEER")
        if peer:
            host, _, port = peer.partition(":")
            env = {"BENCHFARM_IPERF3_HOST": host, "BENCHFARM_IPERF3_PORT": port or "5201"}
        state = Path(os.environ.get("BENCHFARM_STATE", "/tmp/benchfarm"))
        return cls(coordinator=os.environ.get("LG_COORDINATOR", "127.0.0.1:20408"),
                   device_types=Path(os.environ.get("BENCHFARM_DEVICE_TYPES",
                                                    "exporters/device-types")),
                   spool=Path(os.environ.get("BENCHFARM_SPOOL", state / "spool")),
                   environment=env,
                   software_cache=Path(os.environ.get("BENCHFARM_SOFTWARE_CACHE",
                                                      state / "software")),
                   lease_seconds=int(os.environ.get("BENCHFARM_SESSION_LEASE_SECONDS", "15")))


class Fenced(Exception):
    """This runner lost its Lease: another runner of the run owns the board now."""


class Runner:
    def __init__(self, namespace: str, name: str, config: Config) -> None:
        self.namespace, self.name, self.config = namespace, name, config
        self.kube = Kube(outage_budget=3600.0)
        self.quick = copy.copy(self.kube)      # progress writes: never hold the board up
        self.quick.outage_budget = 3.0
        self.identity = f"{socket.gethostname()}/{os.getpid()}"
        self.fenced = threading.Event()
        self.cancel = threading.Event()
        self.deleting = threading.Event()
        self.last_status_write = self.started = 0.0
        self.pending_status: dict[str, Any] = {}
        self.status_lock = threading.Lock()
        self.conditions: list[dict[str, Any]] = []
        self.session: BoardSession | None = None
        self.software: dict[str, dict[str, Fetched]] = {}   # side -> part -> verified file
        self.variables: dict[str, dict[str, str]] = {}      # side -> bootloader variables

    # -- entry --------------------------------------------------------------------------------
    def run(self) -> int:
        body = self.kube.get_run(self.namespace, self.name)
        if body is None:
            log.info("run %s/%s does not exist; nothing to do", self.namespace, self.name)
            return 0
        status = body.get("status") or {}
        expected_uid = os.environ.get("BENCHFARM_RUN_UID")
        if expected_uid and body["metadata"]["uid"] != expected_uid:
            log.info("run %s/%s was re-created (uid differs); nothing to do", self.namespace,
                     self.name)
            return 0
        if status.get("phase") != RUNNING or not status.get("board"):
            log.info("run %s/%s is %s, not running on a board; nothing to do", self.namespace,
                     self.name, status.get("phase"))
            return 0
        self.body, self.status = body, status
        self.uid = body["metadata"]["uid"]
        self.spec = BenchmarkRunSpec(**body["spec"])
        self.generation = body["metadata"].get("generation")
        self.conditions = list(status.get("conditions") or [])
        self.last_status_write = self.started = time.monotonic()  # the launch was the last write
        self.place = status["board"]
        self.attempt = int(status.get("attempts") or 1)
        self.resume = int(status.get("resumes") or 0)
        started = status.get("startTime")
        start_wall = _ts(started) if started else time.time()
        self.deadline = time.monotonic() + (start_wall + self.spec.timeoutSeconds - time.time())
        self.kube.outage_budget = max(10.0, self.deadline - time.monotonic())

        host, user = run_identity(self.uid)
        self.coordinator = Coordinator(self.config.coordinator, host=host, user=user)
        self.coordinator.connect_soon()     # labgrid's first sync overlaps the Lease and set-up
        try:
            return self._leased(body)
        finally:
            self.coordinator.close()

    def _leased(self, body: dict[str, Any]) -> int:
        self.lease = LeaseHolder(
            self.kube, self.namespace, session_lease_name(self.name), self.identity,
            duration=self.config.lease_seconds,
            labels={SESSION_LEASE_LABEL: "true", "benchfarm.io/run-uid": self.uid,
                    "app.kubernetes.io/managed-by": "benchfarm"},
            owner={"apiVersion": body["apiVersion"], "kind": "BenchmarkRun", "name": self.name,
                   "uid": self.uid, "controller": True, "blockOwnerDeletion": False})
        try:
            took = self._take_lease()
        except ApiException as exc:   # the run's namespace is going away with the run
            if exc.status == 403 and "being terminated" in str(exc.body or ""):
                log.info("run %s/%s: its namespace is being deleted; nothing to do",
                         self.namespace, self.name)
                return 0
            raise
        if not took:
            log.warning("another runner holds the lease of %s/%s; exiting", self.namespace,
                        self.name)
            return 3
        log.info("%s/%s: session %s holds the run's Lease", self.namespace, self.name,
                 self.identity)
        threading.Thread(target=self._renew_loop, name="lease", daemon=True).start()
        threading.Thread(target=self._watch_run, name="watch-run", daemon=True).start()
        try:
            self._session()
            return 0
        except Fenced:
            log.warning("lease of %s/%s taken over; this runner stops touching the board",
                        self.namespace, self.name)
            return 4
        finally:
            if not self.fenced.is_set():
                self.lease.release()

    def _take_lease(self) -> bool:
        deadline = time.monotonic() + 2 * self.config.lease_seconds + 5
        while time.monotonic() < deadline:
            if self.lease.try_acquire():
                return True
            time.sleep(1.0)
        return False

    def _renew_loop(self) -> None:
        while not self.fenced.is_set():
            time.sleep(self.config.renew_seconds)
            try:
                self.lease.renew()
                if self.pending_status and self._status_due():
                    self._flush()
            except LeaseLost as exc:
                log.warning("%s", exc)
                self._fence()
                return
            except Exception as exc:  # the API server may be down: keep trying, keep working
                log.warning("lease renewal failed (will retry): %s", exc)

    def _fence(self) -> None:
        self.fenced.set()
        if self.session is not None:
            self.session.stop()

    def _watch_run(self) -> None:
        """Cancel or delete of the run reaches the session within a second or two."""
        from kubernetes import watch
        from ..api.models import GROUP, VERSION
        while not self.fenced.is_set():
            try:
                w = watch.Watch()
                for event in w.stream(self.kube.custom.list_namespaced_custom_object, GROUP,
                                      VERSION, self.namespace, "benchmarkruns",
                                      field_selector=f"metadata.name={self.name}",
                                      timeout_seconds=60):
                    obj = event["object"]
                    if obj.get("metadata", {}).get("uid") != self.uid or event["type"] == "DELETED":
                        self._cancelled(deleting=True)
                        return
                    if obj["metadata"].get("deletionTimestamp"):
                        self._cancelled(deleting=True)
                        return
                    if (obj.get("spec") or {}).get("cancel"):
                        self._cancelled(deleting=False)
                        return
            except Exception as exc:
                log.debug("run watch interrupted: %s", exc)
                time.sleep(2.0)

    def _cancelled(self, *, deleting: bool) -> None:
        if deleting:
            self.deleting.set()
        self.cancel.set()
        if self.session is not None:
            self.session.stop()

    # -- waiting out outages ------------------------------------------------------------------
    def _wait_out(self, what: str, fn: Callable[[], T]) -> T:
        """Call fn until it stops failing with an outage; RunTimeout when the run's time is up."""
        delay = 1.0
        while True:
            if self.fenced.is_set():
                raise Fenced()
            try:
                return fn()
            except Outage as exc:
                if time.monotonic() + delay > self.deadline:
                    raise RunError(f"the run's timeout ran out while waiting for the {exc.party} "
                                   f"({what}): {exc}", reason="RunTimeout") from exc
                log.warning("%s: %s is unavailable (%s); waiting %.0f s", what, exc.party, exc,
                            delay)
                self._progress(f"waiting for the {exc.party} ({what})", "Waiting", force=True,
                               best_effort=True)
                time.sleep(delay)
                delay = min(delay * 2, 30.0)

    # -- status -------------------------------------------------------------------------------
    def _write_status(self, status: dict[str, Any], *, quick: bool = False) -> None:
        if self.fenced.is_set():
            raise Fenced()
        kube = self.quick if quick else self.kube
        if not kube.patch_run_status(self.namespace, self.name, status):
            self._cancelled(deleting=True)
            raise Cancelled("run deleted")
        self.last_status_write = time.monotonic()

    def _status_due(self) -> bool:
        now = time.monotonic()
        return now - self.last_status_write >= max(STATUS_EVERY, STATUS_SHARE * (now - self.started))

    def _flush(self) -> None:
        """Write deferred progress (from the lease thread: status lags at most a few seconds)."""
        with self.status_lock:
            pending = dict(self.pending_status)
            if not pending:
                return
            try:
                self._write_status(pending, quick=True)
                self.pending_status = {}
            except (Outage, Cancelled):
                pass

    def _progress(self, text: str, reason: str, *, extra: dict[str, Any] | None = None,
                  force: bool = False, best_effort: bool = True) -> None:
        """Coalesced progress: at most one write per period (see `_status_due`) unless forced;
        the lease thread flushes what waits. Progress is courtesy: when the API server is down
        the board keeps working and the next write carries it (the checkpoints in the store are
        what a resume relies on). Every progress line is also logged (`kubectl logs job/...`)."""
        log.info("%s/%s: %s", self.namespace, self.name, text)
        new = dict(self.pending_status)
        new.update(extra or {})
        new["progress"] = text
        self.conditions = set_condition(self.conditions, "Succeeded", "Unknown", reason, text,
                                        self.generation)
        new["conditions"] = self.conditions
        self.pending_status = new
        if not force and not self._status_due():
            return
        with self.status_lock:
            try:
                self._write_status(new, quick=best_effort)
                self.pending_status = {}
            except (Outage, Cancelled):
                if not best_effort:
                    raise

    # -- the session --------------------------------------------------------------------------
    def _session(self) -> None:
        threading.Thread(target=_prewarm, name="prewarm", daemon=True).start()
        store = ArtifactStore(StoreConfig.from_env())
        self.spool = Spool(self.config.spool / self.uid, store)
        self.spool.start()
        self.prefix = store.run_prefix(self.namespace, self.name, self.uid,
                                       self.spec.artifactPrefix)
        self.suites = [SuiteSpec(**s) for s in self.status.get("resolvedSuites") or []]
        try:
            self._acquire_and_run()
        finally:
            self.spool.stop()

    def _fetch_software(self) -> dict[str, dict[str, Fetched]]:
        """Every software set of the run, downloaded and verified before the board is touched:
        by side (`st.side_keys`), part -> file. A bad digest or URL is the run's error."""
        cache = SoftwareCache(self.config.software_cache, self.spool.store)
        out = {}
        for key, label, software in self._sides():
            if software is not None and software.parts() != ["bootArgs"]:
                self._progress(f"fetching software{f' {label}' if label else ''}", "Booting")
                out[key] = self._wait_out("fetch the software",
                                          lambda s=software: cache.fetch_set(s))
        return out

    def _acquire_and_run(self) -> None:
        try:
            self.software = self._fetch_software()
        except RunError as exc:
            self._finish(FAILED, exc.reason, exc.message)
            return
        try:
            self._wait_out("acquire the place", lambda: self.coordinator.acquire(self.place))
        except BoardBusy as exc:
            self._end("Busy", exc)
            return
        except RunError as exc:
            self._finish(FAILED, exc.reason, exc.message)
            return
        places = self._wait_out("read the place", self.coordinator.places)
        info = places.get(self.place)
        dtype = self._device_type(info.tags.get("device_type", "") if info else "")
        if info is None or dtype is None:
            self._release()
            self._end("LabFault", InfraError(f"place {self.place} vanished or has an unknown "
                                             "device type", reason="PlaceMissing"))
            return
        first = not self.status.get("startTime")
        extra: dict[str, Any] = {"startTime": now_iso()} if first else {}
        steps = self._plan()
        ckpt_prefix = st.checkpoint_prefix(self.prefix, self.attempt)
        done = self._wait_out("read the checkpoints",
                              lambda: st.done_names(self.spool.keys(ckpt_prefix), ckpt_prefix))
        todo = st.remaining(steps, done)
        self.steps_total, self.steps_done = len(steps), len(steps) - len(todo)
        resumed = bool(done)
        if resumed:
            log.info("resuming %s/%s at %s; %d of %d step(s) finished before are kept",
                     self.namespace, self.name, todo[0].name if todo else "the results",
                     len(done), len(steps))
        self._progress("resuming: power-cycling the board" if resumed else "board acquired",
                       "Resuming" if resumed else "Booting", extra=extra, force=resumed)
        serial_key = f"{self.prefix}/serial/attempt-{self.attempt:03d}-run-{self.resume:02d}.log"
        serial_log = SerialLog(self.spool.append_path(serial_key))
        environment = {**self.config.environment,
                       "BENCHFARM_RUN": f"{self.namespace}/{self.name}"}
        self.session = BoardSession(self.place, info.resources, dtype,
                                    self._wait_out("connect to the coordinator",
                                                   self.coordinator.session),
                                    deadline=self.deadline,
                                    serial_log=serial_log, environment=environment,
                                    guard=self._guard)
        if self.cancel.is_set():
            self.session.cancelled.set()
        outcome: tuple[str, BaseException | None] = ("Completed", None)
        try:
            self._steps(todo, dtype, resumed)
        except Cancelled as exc:
            outcome = ("Cancelled", exc)
        except BoardFault as exc:
            outcome = ("BoardFault", exc)
        except BoardBusy as exc:
            outcome = ("Busy", exc)
        except RunError as exc:
            outcome = ("RunError", exc)
        except Fenced:
            raise
        except InfraError as exc:
            outcome = ("LabFault", exc)
        except Exception as exc:  # a bug must not leave the board on or the run hanging
            log.exception("unexpected error in the session of %s/%s", self.namespace, self.name)
            outcome = ("InternalError", exc)
        finally:
            serial_log.close()
        if self.fenced.is_set():
            raise Fenced()
        if self.cancel.is_set():   # stop() closed the console: whatever broke, it was us
            outcome = ("Cancelled", None)
        kind, exc = outcome
        if kind != "Busy":
            self._power_off()
            self._release()
        self.spool.put_file(serial_key)
        if kind == "Completed":
            try:
                self._complete(dtype, serial_key)
            except RunError as err:
                self._finish(FAILED, err.reason, err.message)
            except (Fenced, Cancelled):
                raise
            except Exception as err:  # a bug in reporting must not crash-loop the session
                log.exception("building the results of %s/%s failed", self.namespace, self.name)
                self._finish(FAILED, "InternalError", f"building the results failed: "
                             f"{type(err).__name__}: {str(err)[:300]}")
        elif kind == "Cancelled":
            if not self.deleting.is_set():
                self._finish(CANCELLED, "Cancelled", "cancelled by spec.cancel")
        elif kind == "RunError":
            self._finish(FAILED, exc.reason, exc.message)  # type: ignore[union-attr]
        elif kind == "InternalError":
            self._finish(FAILED, "InternalError", f"the session failed unexpectedly: "
                         f"{type(exc).__name__}: {str(exc)[:300]}")
        else:
            self._end(kind, exc)  # type: ignore[arg-type]

    def _device_type(self, name: str) -> DeviceType | None:
        return load_device_types(self.config.device_types).get(name) if name else None

    def _guard(self) -> None:
        """Before every power operation: still our Lease, still our place."""
        if self.fenced.is_set():
            raise Fenced()
        holder = self._wait_out("check the place", lambda: self.coordinator.holder(self.place))
        if holder == self.coordinator.identity:
            return
        if holder is None:  # the coordinator restarted and forgot every lock: take it back
            log.warning("place %s lost its lock (coordinator restart?); acquiring it again",
                        self.place)
            self._wait_out("re-acquire the place", lambda: self.coordinator.acquire(self.place))
            return
        raise BoardBusy(f"place {self.place} is now held by {holder}; not touching it")

    def _steps(self, todo: list[st.Step], dtype: DeviceType, resumed: bool) -> None:
        session = self.session
        assert session is not None
        self._stage()
        if todo and todo[0].kind != st.BOOT:
            self._boot(todo[0].side)   # resuming mid-plan: the board's state is unknown
        recoveries = 0
        for step in todo:
            if self._enough(step):
                break
            try:
                checkpoint = self._run_step(step, dtype)
            except BoardFault as exc:
                if exc.reason not in ("SerialFailed", "ShellFailed") or \
                        recoveries >= CONSOLE_RECOVERIES or session.cancelled.is_set():
                    raise
                recoveries += 1     # a dropped console: power-cycle and do this step again
                log.warning("console lost during %s (%s); power-cycling (%d/%d)", step.name, exc,
                            recoveries, CONSOLE_RECOVERIES)
                session.board.close()
                self._boot(step.side)
                checkpoint = self._run_step(step, dtype)
            self._checkpoint(step, checkpoint, dtype)

    def _sides(self) -> list[tuple[str, str, Any]]:
        """(key, label, software set or None) of each side: key "" for a one-sided run."""
        sets = self.spec.software_sets()
        return [(key, label, software)
                for key, (label, software) in zip(st.side_keys(len(sets)), sets)]

    def _plan(self) -> list[st.Step]:
        return st.plan_steps(self.spec.bootCycles, [s.name for s in self.suites],
                             self._iterations(), self.spec.warmupIterations,
                             sides=len(self.spec.software_sets()))

    def _stage(self) -> None:
        """Stage every side's software on the board's exporter: side -> bootloader variables."""
        from ..lab.deploy import stage, with_modules
        assert self.session is not None
        for key, _, software in self._sides():
            if software is None:
                continue
            files = {part: f.path for part, f in self.software.get(key, {}).items()}
            if "modules" in files:
                files["initrd"] = with_modules(files["initrd"], files.pop("modules"))
            self.variables[key] = stage(self.session.board.target, files, software.bootArgs)

    def _boot(self, side: str) -> Any:
        """A power cycle into the side's software (or the board's own)."""
        assert self.session is not None
        self.session.board.strategy.deploy(self.variables.get(side, {}))
        return self.session.boot()

    def _software_provenance(self, side: str) -> dict[str, Any]:
        label, software = next((lbl, sw) for key, lbl, sw in self._sides() if key == side)
        if software is None:
            return {}
        files = {part: f.provenance() for part, f in self.software.get(side, {}).items()}
        return {"software": {"name": label, **files,
                             **({"bootArgs": software.bootArgs} if software.bootArgs else {})}}

    def _iterations(self) -> int:
        """Measured iterations planned: fixed, or at most repeat.maxIterations."""
        return self.spec.repeat.maxIterations if self.spec.repeat else self.spec.iterations

    def _enough(self, step: st.Step) -> bool:
        """With spec.repeat, before each new iteration: do the checkpoints already say enough?"""
        rule = self.spec.repeat
        if rule is None or step.kind != st.SUITE or step.suite_index != 0 or step.warmup:
            return False
        from . import results as res
        got = res.Collected()
        for c in self._checkpoints():
            got.add(c)
        measured = step.iteration - 1 - self.spec.warmupIterations
        verdict = decide(res.headline_values(got.records, self.suites), rule.relativeCI95,
                         measured, rule.minIterations, rule.maxIterations)
        if verdict is not None:
            log.info("%s/%s: %s after %d iteration(s); not starting iteration %d",
                     self.namespace, self.name, verdict, measured, step.iteration)
        return verdict is not None

    def _run_step(self, step: st.Step, dtype: DeviceType) -> dict[str, Any]:
        session = self.session
        assert session is not None
        label = f"step {self.steps_done + 1}/{self.steps_total}: {step.name}"
        if step.kind == st.BOOT:
            self._progress(f"boot {step.cycle}/{self.spec.bootCycles}" if not step.side else
                           f"boot into {step.side.upper()}, iteration {step.cycle}", "Booting")
            boot = self._boot(step.side)
            if boot.failed_attempts:
                self.kube.event(self._ref(), "Warning", "BootRetried",
                                f"{session.place}: boot {step.cycle} took "
                                f"{len(boot.failed_attempts) + 1} power cycles; the failed: "
                                f"{'; '.join(boot.failed_attempts)}"[:1000])
            return {"kind": st.BOOT, "cycle": step.cycle, "side": step.side,
                    "phases": boot.phases, "events": boot.events,
                    "powerOnWall": boot.power_on_wall, "kernelClock": boot.kernel_clock,
                    **({"failedAttempts": boot.failed_attempts} if boot.failed_attempts else {})}
        if step.kind == st.PROVENANCE:
            return {"kind": st.PROVENANCE, "side": step.side,
                    "provenance": {**session.provenance(self.suites),
                                   **self._software_provenance(step.side)}}
        spec = self.suites[step.suite_index]
        self._progress(f"iteration {step.iteration}/{self.spec.warmupIterations + self._iterations()}"
                       f"{' (warm-up)' if step.warmup else ''}, suite {spec.name} ({label})",
                       "Running")
        record, output, evidence = session.suite(spec, step.iteration, step.warmup)
        key = st.raw_key(self.prefix, spec.name, step.iteration, step.side)
        record.artifact = self.spool.put(key, output.encode(), "text/plain")
        return {"kind": st.SUITE, "side": step.side, "record": record.as_dict(),
                "evidence": evidence}

    def _checkpoint(self, step: st.Step, checkpoint: dict[str, Any], dtype: DeviceType) -> None:
        key = st.checkpoint_key(self.prefix, self.attempt, step)
        self.spool.put(key, json.dumps(checkpoint).encode(), "application/json")
        self.steps_done += 1
        extra: dict[str, Any] = {"checkpoint": {"attempt": self.attempt, "done": self.steps_done,
                                                "total": self.steps_total, "last": step.name}}
        if step.kind == st.BOOT:
            self.boot_values = getattr(self, "boot_values", self._boot_values(dtype))
            value = checkpoint["phases"].get(dtype.boot.headline)
            if value is not None:
                self.boot_values.append(value)
                extra["bootSeconds"] = seed_format(self.boot_values)
        self._progress(f"{step.name} done", "Booting" if step.kind == st.BOOT else "Running",
                       extra=extra, best_effort=True)

    def _boot_values(self, dtype: DeviceType) -> list[float]:
        """Headline boot figures of boots checkpointed before a resume."""
        return [c["phases"][dtype.boot.headline] for c in self._checkpoints()
                if c["kind"] == st.BOOT and dtype.boot.headline in c["phases"]]

    def _checkpoints(self) -> list[dict[str, Any]]:
        prefix = st.checkpoint_prefix(self.prefix, self.attempt)
        names = self._wait_out("read the checkpoints",
                               lambda: st.done_names(self.spool.keys(prefix), prefix))
        steps = self._plan()
        return [json.loads(self._wait_out("read a checkpoint", lambda s=s: self.spool.get(
            st.checkpoint_key(self.prefix, self.attempt, s)))) for s in steps if s.name in names]

    # -- the end ------------------------------------------------------------------------------
    def _power_off(self) -> None:
        if self.session is None or self.fenced.is_set():
            return
        try:
            self.session.cancelled.clear()
            self.session.power_off()
        except Fenced:
            raise
        except Exception as exc:
            log.warning("power off of %s failed: %s", self.place, exc)
        finally:
            self.session.close()

    def _release(self) -> None:
        if self.fenced.is_set():
            return
        try:
            self._wait_out("release the place", lambda: self.coordinator.release(self.place))
        except Exception as exc:
            log.warning("could not release %s: %s", self.place, exc)

    def _complete(self, dtype: DeviceType, serial_key: str) -> None:
        from . import results as res
        self._progress("board released; building the results", "Reporting",
                       extra={"boardReleased": True}, force=True, best_effort=True)
        got = res.Collected()
        for c in self._checkpoints():
            got.add(c)
        baseline_doc = None
        if self.spec.baseline:
            baseline_doc = self._baseline_doc(self.spec.baseline)
        policy_body = self.kube.get_cluster("labpolicies", "default")
        policy = LabPolicySpec(**(policy_body or {}).get("spec") or {}) if policy_body else None
        run_info = {"namespace": self.namespace, "name": self.name, "uid": self.uid,
                    "board": self.place, "deviceType": dtype.name,
                    "plan": self.spec.plan or "(inline)", "iterations": self._iterations(),
                    "bootCycles": self.spec.bootCycles, "attempt": self.attempt,
                    "warmupIterations": self.spec.warmupIterations,
                    "resumes": self.resume}
        sides = self._sides()
        if len(sides) == 2:
            labels = {key: label for key, label, _ in sides}
            docs = res.build_ab(run_info, dtype, self.suites, got, labels, policy=policy)
            got.provenance = {labels[k]: c.provenance for k, c in got.sides.items()}
            got.boots = [b for c in got.sides.values() for b in c.boots]
            got.records = [r for c in got.sides.values() for r in c.records]
        else:
            docs = res.build(run_info, dtype, self.suites, got, baseline=self.spec.baseline,
                             baseline_doc=baseline_doc, policy=policy, repeat=self.spec.repeat)
        urls = [self._serial_log(serial_key)]
        for name, (data, ctype) in docs.files.items():
            urls.append(self.spool.put(f"{self.prefix}/{name}", data, ctype))
        urls.append(self.spool.store.url(f"{self.prefix}/raw/"))
        if not self.spool.drain(self.deadline):
            raise RunError(f"the run's timeout ran out while uploading artifacts: "
                           f"{self.spool.last_error}", reason="RunTimeout")
        status: dict[str, Any] = {"results": docs.results, "artifacts": urls,
                                  "provenance": got.provenance,
                                  "progress": f"done ({len(got.records)} suite runs)"}
        if docs.regression is not None:
            self.conditions = set_condition(self.conditions, "Regressed", *docs.regression,
                                            self.generation)
        if docs.failed:
            self._finish(FAILED, "SuitesFailed", f"{len(docs.failed)} suite(s) failed: "
                         f"{', '.join(docs.failed)}; see report.md", status)
        else:
            self._finish(SUCCEEDED, "Completed", f"{len(got.boots)} boot(s) timed and "
                         f"{len(got.records)} suite runs on {self.place}", status)
        if docs.regression is not None and docs.regression[0] == "True":
            self.kube.event(self._ref(), "Warning", "Regressed", docs.regression[2])

    def _serial_log(self, current_key: str) -> str:
        """serial.log: every console byte of this attempt, across resumes, in order."""
        parts = sorted(k for k in self._wait_out("list serial logs", lambda: self.spool.keys(
            f"{self.prefix}/serial/attempt-{self.attempt:03d}-")))
        data = b"".join(self._wait_out("read a serial log", lambda k=k: self.spool.get(k))
                        for k in parts)
        return self.spool.put(f"{self.prefix}/serial.log", data, "text/plain")

    def _baseline_doc(self, baseline: str) -> dict[str, Any] | None:
        base = self.kube.get_run(self.namespace, baseline)
        if base is None or (base.get("status") or {}).get("phase") not in (SUCCEEDED, FAILED):
            return None
        prefix = self.spool.store.run_prefix(self.namespace, baseline, base["metadata"]["uid"],
                                             base["spec"].get("artifactPrefix", ""))
        try:
            return json.loads(self._wait_out("read the baseline", lambda: self.spool.store.get(
                f"{prefix}/metrics.json")))
        except InfraError:
            return None

    def _finish(self, phase: str, reason: str, message: str,
                extra: dict[str, Any] | None = None) -> None:
        ok = "True" if phase == SUCCEEDED else "False"
        self.conditions = set_condition(self.conditions, "Succeeded", ok, reason, message,
                                        self.generation)
        status = {**(extra or {}), "phase": phase, "completionTime": now_iso(),
                  "observedGeneration": self.generation, "conditions": self.conditions}
        if phase == CANCELLED or self.deleting.is_set():
            status.pop("results", None)
        try:
            self._wait_out("write the result", lambda: self._write_status(status))
        except Cancelled:
            return
        self.kube.event(self._ref(), "Normal" if ok == "True" else "Warning", reason, message)

    def _end(self, outcome: str, exc: BaseException) -> None:
        """Hand the run back to the operator, which charges the board or not and moves the run."""
        reason = getattr(exc, "reason", type(exc).__name__)
        message = str(exc)[:1000]
        log.warning("session of %s/%s ends: %s (%s: %s)", self.namespace, self.name, outcome,
                    reason, message)
        end = {"attempt": self.attempt, "outcome": outcome, "reason": reason,
               "message": message, "party": getattr(exc, "party", "lab")}
        try:
            self._wait_out("report the end of the session",
                           lambda: self._write_status({"sessionEnd": end,
                                                       "progress": f"{outcome}: {reason}"}))
        except Cancelled:
            return

    def _ref(self) -> dict[str, Any]:
        return {"apiVersion": self.body["apiVersion"], "kind": "BenchmarkRun",
                "metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid}}


def _prewarm() -> None:
    """Load what only the end of a session needs (statistics, plotting: about a second) while the
    board boots, so the run's results follow its last step without that delay."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401
        from . import results  # noqa: F401  (scipy through the regression rule)
    except Exception:  # only a head start; the real import reports any problem
        log.debug("prewarm failed", exc_info=True)


def _ts(iso: str) -> float:
    return datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


def _logging() -> None:
    logging.basicConfig(level=os.environ.get("BENCHFARM_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kubernetes").setLevel(logging.WARNING)


def main(ref: str) -> int:
    _logging()
    namespace, _, name = ref.partition("/")
    if not name:
        print("benchfarm session run: expected NAMESPACE/NAME", flush=True)
        return 2
    return Runner(namespace, name, Config.from_env()).run()
