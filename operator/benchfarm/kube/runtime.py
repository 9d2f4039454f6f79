"""The operator's moving parts between kopf's handlers and the lab.

kopf feeds every BenchmarkRun, Board and LabPolicy it sees into this registry; a scheduler loop on
kopf's event loop asks `core.queue` who goes next, checkpoints the decision in the run's status and
hands the run to a board session on the executor. Sessions report back through status patches.
labgrid's acquisition is the lock on a board: a place held by anyone else is never taken, and at
start-up the operator powers off and releases every place it still holds and re-queues runs that
were running, so a restart never double-books a board and never loses a run.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from ..api.devicetype import DeviceType
from ..api.models import BenchmarkRunSpec, LabPolicySpec, SuiteSpec, TestPlanSpec
from ..api.suites import GPU_SUITES
from ..core import queue as q
from ..core.conditions import now_iso, set_condition
from ..core.regression import RegressionPolicy, Thresholds, compare, worst_offenders
from ..core.results import metrics_document, samples_from_document, summary
from ..core.stats import seed_format
from ..errors import BoardBusy, InfraError, RunError
from ..lab.board import Board
from ..lab.coordinator import Coordinator, PlaceInfo
from ..lab.session import BoardSession, Cancelled, Executor, SessionRequest, SessionResult, \
    ThreadExecutor, plan_digest
from ..report.html import html
from ..report.tables import comparison_markdown, markdown, rst
from ..store.artifacts import ArtifactStore, StoreConfig
from . import metrics
from .client import Kube

log = logging.getLogger("benchfarm")

PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED = "Pending", "Running", "Succeeded", "Failed", "Cancelled"
FINISHED = {SUCCEEDED, FAILED, CANCELLED}
QUEUE_POSITION_LIMIT = 50
QUEUE_POSITION_PERIOD = 5.0
BOARD_REFRESH_PERIOD = 3.0


def needs_gpu(suites: list[Any]) -> bool:
    return any((s.suite if isinstance(s, SuiteSpec) else s.get("suite")) in GPU_SUITES
               for s in suites)


def _ts(iso: str | None) -> float:
    if not iso:
        return time.time()
    return datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


@dataclass
class RunState:
    namespace: str
    name: str
    uid: str
    generation: int
    created: float
    spec: BenchmarkRunSpec
    status: dict[str, Any]
    deleting: bool = False
    starting: bool = False          # picked by the scheduler, status not yet confirmed

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def phase(self) -> str | None:
        return self.status.get("phase")

    def ref(self) -> dict[str, Any]:
        return {"apiVersion": "benchfarm.io/v1alpha1", "kind": "BenchmarkRun",
                "metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid}}


@dataclass
class BoardRecord:
    name: str
    device_type: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    online: bool = False
    held_by_other: str | None = None
    maintenance: bool = False
    run: str | None = None
    failures: int = 0
    quarantined_since: float | None = None
    reason: str | None = None
    last_status: dict[str, Any] | None = None

    @property
    def state(self) -> str:
        if self.quarantined_since is not None:  # also while its health check runs
            return "Quarantined"
        if self.run:
            return "Busy"
        if not self.online:
            return "Offline"
        if self.maintenance:
            return "Maintenance"
        if self.held_by_other:
            return "Busy"
        return "Idle"


class Runtime:
    def __init__(self, kube: Kube, coordinator: Coordinator, store: ArtifactStore,
                 device_types: dict[str, DeviceType], executor: Executor | None = None,
                 environment: dict[str, str] | None = None) -> None:
        self.kube = kube
        self.coordinator = coordinator
        self.store = store
        self.device_types = device_types
        self.executor = executor or ThreadExecutor()
        self.environment = environment or {}
        self.runs: dict[str, RunState] = {}
        self.boards: dict[str, BoardRecord] = {}
        self.sessions: dict[str, BoardSession] = {}
        self.policy = LabPolicySpec()
        self.fairness = q.RoundRobinFairness()
        self.lock = threading.RLock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.wake_event: asyncio.Event | None = None
        self.task: asyncio.Task | None = None
        self.inventory_known = False
        self.positions: dict[str, int | None] = {}
        self.last_positions_at = 0.0
        self.last_refresh = 0.0
        self.health_checks: set[str] = set()

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def from_env(cls) -> Runtime:
        dt_dir = Path(os.environ.get("BENCHFARM_DEVICE_TYPES", "exporters/device-types"))
        device_types = {}
        for f in sorted(dt_dir.glob("*.yaml")):
            dt = DeviceType(**yaml.safe_load(f.read_text()))
            device_types[dt.name] = dt
        env = {}
        peer = os.environ.get("BENCHFARM_IPERF3_PEER")
        if peer:
            host, _, port = peer.partition(":")
            env = {"BENCHFARM_IPERF3_HOST": host, "BENCHFARM_IPERF3_PORT": port or "5201"}
        coordinator = Coordinator(os.environ.get("LG_COORDINATOR", "127.0.0.1:20408"),
                                  user=os.environ.get("BENCHFARM_LABGRID_USER", "benchfarm"),
                                  host=os.environ.get("BENCHFARM_LABGRID_HOST", "operator"))
        store = ArtifactStore(StoreConfig.from_env())
        return cls(Kube(), coordinator, store, device_types, environment=env)

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.wake_event = asyncio.Event()
        await asyncio.to_thread(self._recover)
        metrics.serve()
        self.task = asyncio.create_task(self._scheduler_loop(), name="benchfarm-scheduler")

    async def stop(self) -> None:
        if self.task:
            self.task.cancel()
        self.executor.shutdown()
        await asyncio.to_thread(self.coordinator.close)

    def wake(self) -> None:
        if self.loop is not None and self.wake_event is not None:
            self.loop.call_soon_threadsafe(self.wake_event.set)

    def _recover(self) -> None:
        """After a restart: nothing runs, so free our places and put running runs back in line."""
        self.store.ensure_bucket()
        for board in self.kube.list_cluster("boards"):
            st = board.get("status") or {}
            rec = self.boards.setdefault(board["metadata"]["name"],
                                         BoardRecord(board["metadata"]["name"]))
            rec.failures = int(st.get("consecutiveInfraFailures") or 0)
            rec.maintenance = bool((board.get("spec") or {}).get("maintenance"))
            if st.get("state") == "Quarantined":
                rec.quarantined_since = _ts(st.get("quarantinedAt"))
                rec.reason = st.get("reason")
        for policy in self.kube.list_cluster("labpolicies"):
            self.policy = LabPolicySpec(**policy.get("spec") or {})
        try:
            held = self.coordinator.held_by_us()
        except InfraError as exc:
            log.warning("labgrid coordinator unavailable: %s", exc)
            held = []
        for place in held:
            log.info("releasing place %s held from before the restart", place)
            self._power_off_and_release(place)
        for body in self.kube.list_runs():
            st = body.get("status") or {}
            if st.get("phase") == RUNNING:
                meta = body["metadata"]
                log.info("re-queueing %s/%s (was running on %s before the restart)",
                         meta["namespace"], meta["name"], st.get("board"))
                self.kube.patch_run_status(meta["namespace"], meta["name"], {
                    "phase": PENDING, "board": None, "progress": "re-queued",
                    "conditions": set_condition(
                        st.get("conditions"), "Scheduled", "False", "Requeued",
                        f"the operator restarted while this run was on {st.get('board')}; "
                        "it will run again", meta.get("generation"))})
                self.kube.event(body, "Normal", "Requeued",
                                "operator restarted mid-run; the run is queued again")
        self._refresh_boards(force=True)

    def _places_or_none(self) -> dict[str, PlaceInfo] | None:
        try:
            return self.coordinator.places()
        except InfraError as exc:
            log.warning("labgrid coordinator unavailable: %s", exc)
            return None

    # -- registry (fed by kopf) ---------------------------------------------------------------
    def observe_run(self, event_type: str | None, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if event_type == "DELETED":
            with self.lock:
                self.runs.pop(key, None)
            return
        try:
            spec = BenchmarkRunSpec(**(body.get("spec") or {}))
        except Exception:  # invalid bodies are rejected by admission; ignore them here
            return
        with self.lock:
            current = self.runs.get(key)
            status = dict(body.get("status") or {})
            if current is not None and current.uid == meta["uid"]:
                current.spec = spec
                current.generation = meta.get("generation", 1)
                current.deleting = bool(meta.get("deletionTimestamp"))
                # our own in-flight transitions win over an older watch event
                if not (current.starting and status.get("phase") == PENDING):
                    current.status = status
            else:
                self.runs[key] = RunState(meta["namespace"], meta["name"], meta["uid"],
                                          meta.get("generation", 1),
                                          _ts(meta.get("creationTimestamp")), spec, status,
                                          deleting=bool(meta.get("deletionTimestamp")))
        self.wake()

    def observe_board(self, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        with self.lock:
            rec = self.boards.setdefault(name, BoardRecord(name))
            rec.maintenance = bool((body.get("spec") or {}).get("maintenance"))
        self.wake()

    def observe_policy(self, body: dict[str, Any] | None) -> None:
        self.policy = LabPolicySpec(**(body or {}).get("spec") or {}) if body else LabPolicySpec()
        self.wake()

    # -- admission ----------------------------------------------------------------------------
    def admit(self, body: dict[str, Any]) -> None:
        """Validate what the schema cannot (plan exists, policy, matching boards) and queue."""
        meta = body["metadata"]
        ns, name, gen = meta["namespace"], meta["name"], meta.get("generation")
        status = body.get("status") or {}
        if status.get("phase"):
            return  # admitted before (operator restart)
        try:
            spec = BenchmarkRunSpec(**body["spec"])
            suites = self.resolve_suites(ns, spec)
            if self.inventory_known:
                sel = self._selector(spec)
                boards = [self._board_view(b) for b in self.boards.values() if b.device_type]
                if not q.could_ever_match(sel, boards):
                    raise RunError(f"no board in the lab matches the selector "
                                   f"{spec.selector.model_dump(exclude_none=True)}",
                                   reason="NoMatchingBoard")
                self._check_capabilities(suites,
                                         {b.device_type for b in boards if q.matches(sel, b)})
        except RunError as exc:
            self.kube.patch_run_status(ns, name, {
                "phase": FAILED, "completionTime": now_iso(), "observedGeneration": gen,
                "conditions": set_condition(status.get("conditions"), "Succeeded", "False",
                                            exc.reason, exc.message, gen)})
            self.kube.event(body, "Warning", exc.reason, exc.message)
            return
        self.kube.patch_run_status(ns, name, {
            "phase": PENDING, "observedGeneration": gen, "progress": "queued",
            "planDigest": plan_digest(suites),
            "resolvedSuites": [s.model_dump(exclude_none=True) for s in suites],
            "conditions": set_condition(status.get("conditions"), "Succeeded", "Unknown",
                                        "Queued", "waiting for a matching board", gen)})
        self.kube.event(body, "Normal", "Queued", "run admitted and queued")
        self.wake()

    def _check_capabilities(self, suites: list[SuiteSpec], device_types: set[str]) -> None:
        """Refuse a plan no matching board can run: a GPU, low-power modes, programs."""
        kinds = [self.device_types.get(n) for n in sorted(device_types)]
        known = [dt for dt in kinds if dt is not None]
        if needs_gpu(suites) and known and not any(dt.gpu for dt in known):
            raise RunError(f"this plan runs GPU suites ({', '.join(s.name for s in suites if s.suite in GPU_SUITES)}) "
                           f"but no matching board has a GPU ({', '.join(dt.name for dt in known)})",
                           reason="NoGPU")
        for s in suites:
            if s.suite == "low-power":
                mode = s.parameters.get("mode", "")
                if known and not any(dt.mode(mode) and dt.rails for dt in known):
                    raise RunError(f"suite {s.name}: no matching board has low-power mode "
                                   f"{mode!r} and rail monitoring", reason="NoLowPowerMode")
        problems = []
        for dt in kinds:
            if dt is None or dt.programs is None:
                return  # a matching board of unknown contents may have them
            missing = sorted({p for s in suites for p in s.requires} - set(dt.programs))
            if not missing:
                return
            problems.append(f"{dt.name} lacks {', '.join(missing)}")
        if problems:
            raise RunError("no matching board has the programs this plan needs: "
                           + "; ".join(problems), reason="MissingPrograms")

    def resolve_suites(self, namespace: str, spec: BenchmarkRunSpec) -> list[SuiteSpec]:
        policy = self.policy.for_namespace(namespace)
        if spec.priority > policy.maxPriority:
            raise RunError(f"priority {spec.priority} is above the highest this namespace may use "
                           f"({policy.maxPriority})", reason="PolicyViolation")
        if spec.suites is not None:
            if not policy.allowInlineSuites:
                raise RunError("inline suites are not allowed in this namespace (they run arbitrary "
                               "commands on shared boards); use a TestPlan", reason="PolicyViolation")
            suites = list(spec.suites)
        else:
            plan = self.kube.get_cluster("testplans", spec.plan or "")
            if plan is None:
                raise RunError(f"TestPlan {spec.plan!r} not found", reason="PlanNotFound")
            try:
                suites = TestPlanSpec(**plan["spec"]).suites
            except Exception as exc:
                raise RunError(f"TestPlan {spec.plan!r} is invalid: {exc}", reason="InvalidPlan") from exc
        names = [s.name for s in suites]
        if len(set(names)) != len(names):
            raise RunError("suite names in a plan must be unique", reason="InvalidPlan")
        return suites

    # -- scheduling ---------------------------------------------------------------------------
    @staticmethod
    def _selector(spec: BenchmarkRunSpec) -> q.Selector:
        return q.Selector.of(spec.selector.deviceType, spec.selector.labels, spec.selector.board)

    def _board_view(self, b: BoardRecord) -> q.BoardView:
        dt = self.device_types.get(b.device_type)
        return q.BoardView(b.name, b.device_type, b.labels, available=b.state == "Idle",
                           gpu=bool(dt and dt.gpu))

    async def _scheduler_loop(self) -> None:
        assert self.wake_event is not None
        while True:
            try:
                await asyncio.wait_for(self.wake_event.wait(), timeout=2.0)
            except asyncio.TimeoutError:
                pass
            self.wake_event.clear()
            try:
                if time.monotonic() - self.last_refresh > BOARD_REFRESH_PERIOD:
                    await asyncio.to_thread(self._refresh_boards)
                await asyncio.to_thread(self._schedule_round)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scheduler round failed; retrying")
                await asyncio.sleep(1)

    def _schedule_round(self) -> None:
        now = time.time()
        with self.lock:
            runs = list(self.runs.values())
            waiting = [r for r in runs if r.phase == PENDING and not r.starting and not r.deleting
                       and not r.spec.cancel]
            running_ns: dict[str, int] = {}
            for r in runs:
                if r.phase == RUNNING or r.starting:
                    running_ns[r.namespace] = running_ns.get(r.namespace, 0) + 1
            boards = [self._board_view(b) for b in self.boards.values() if b.device_type]
            queued = [q.QueuedRun(r.key, r.namespace, r.spec.priority, r.created,
                                  self._selector(r.spec),
                                  frozenset(r.status.get("avoidBoards") or []),
                                  needs_gpu=needs_gpu(r.status.get("resolvedSuites") or []))
                      for r in waiting]
            limits = {r.namespace: self.policy.for_namespace(r.namespace).maxBoards for r in waiting}
            decision = q.schedule(queued, boards, running_per_namespace=running_ns,
                                  max_boards=limits, fairness=self.fairness, now=now)
            started = []
            for a in decision.assignments:
                run = self.runs[a.run]
                run.starting = True
                self.boards[a.board].run = a.run
                started.append((run, a.board))
        for run, board in started:
            self.executor.submit(lambda run=run, board=board: self._job(run, board))
        metrics.observe_lab(len(decision.order), len(started) + sum(running_ns.values()),
                            [b.state for b in self.boards.values()])
        self._expire(waiting, now)
        self._publish_positions(decision.order)
        self._health_checks()
        self._ttl(runs, now)

    def _expire(self, waiting: list[RunState], now: float) -> None:
        for r in waiting:
            limit = r.spec.queueTimeoutSeconds
            if limit and now - r.created > limit:
                self._finish(r, FAILED, "QueueTimeout",
                             f"no matching board became free within {limit} s")

    def _publish_positions(self, order: list[q.QueuedRun]) -> None:
        if time.monotonic() - self.last_positions_at < QUEUE_POSITION_PERIOD:
            return
        self.last_positions_at = time.monotonic()
        new = q.queue_positions(order, QUEUE_POSITION_LIMIT)
        for key in set(self.positions) | set(new):
            if self.positions.get(key) != new.get(key) and key in self.runs:
                run = self.runs[key]
                if run.phase == PENDING and not run.starting:
                    self.kube.patch_run_status(run.namespace, run.name,
                                               {"queuePosition": new.get(key)})
        self.positions = new

    def _ttl(self, runs: list[RunState], now: float) -> None:
        for r in runs:
            ttl = r.spec.ttlSecondsAfterFinished
            if ttl is not None and r.phase in FINISHED and r.status.get("completionTime"):
                if now - _ts(r.status["completionTime"]) >= ttl:
                    self.kube.delete_run(r.namespace, r.name)

    # -- a run on a board ---------------------------------------------------------------------
    def _patch(self, run: RunState, status: dict[str, Any]) -> None:
        """Checkpoint in the API first; only then may the scheduler act on the new state."""
        if not self.kube.patch_run_status(run.namespace, run.name, status):
            raise Cancelled("run deleted")
        with self.lock:
            run.status.update(status)

    def _job(self, run: RunState, board: str) -> None:
        dtype = self.device_types.get(self.boards[board].device_type)
        session: BoardSession | None = None
        try:
            self._patch(run, {
                "phase": RUNNING, "board": board, "queuePosition": None, "progress": "acquiring",
                "conditions": set_condition(run.status.get("conditions"), "Scheduled", "True",
                                            "BoardAssigned", f"running on {board}",
                                            run.generation)})
            with self.lock:
                run.starting = False
            self.kube.event(run.ref(), "Normal", "Scheduled", f"board {board} assigned")
            if dtype is None:
                raise InfraError(f"board {board} has unknown device type", reason="UnknownDeviceType")
            suites = [SuiteSpec(**s) for s in run.status.get("resolvedSuites") or []]
            if not suites:
                suites = self.resolve_suites(run.namespace, run.spec)
            request = SessionRequest(
                run_key=run.key, place=board, device_type=dtype, suites=suites,
                iterations=run.spec.iterations, warmup_iterations=run.spec.warmupIterations,
                boot_cycles=run.spec.bootCycles,
                deadline=time.monotonic() + run.spec.timeoutSeconds,
                environment=self.environment)
            prefix = self.store.run_prefix(run.namespace, run.name, run.uid, run.spec.artifactPrefix)
            session = BoardSession(
                self.coordinator, request,
                progress=lambda kind, data: self._progress(run, dtype, kind, data),
                on_output=lambda name, text: self.store.put(f"{prefix}/{name}", text.encode(),
                                                            "text/plain"))
            with self.lock:
                self.sessions[run.key] = session
                if run.spec.cancel or run.deleting:
                    session.cancelled.set()
            result = session.run()
            self._complete(run, dtype, board, suites, result, prefix)
            self._board_ok(board)
        except BoardBusy as exc:
            with self.lock:
                self.boards[board].held_by_other = str(exc)
            self._requeue(run, f"board {board} was taken by someone else: {exc}", avoid=None)
        except Cancelled:
            self._cancelled(run, session)
        except InfraError as exc:
            if session is not None and session.fenced.is_set():
                self._cancelled(run, session)
            else:
                self._infra_failure(run, board, exc, session)
        except RunError as exc:
            self._finish(run, FAILED, exc.reason, exc.message)
        except Exception as exc:  # a bug must not lose the run or the board
            log.exception("%s: unexpected error on %s", run.key, board)
            if session is not None and session.fenced.is_set():
                self._cancelled(run, session)
            else:
                self._infra_failure(run, board, InfraError(f"unexpected: {exc}"), session)
        finally:
            with self.lock:
                run.starting = False
                self.sessions.pop(run.key, None)
                if self.boards[board].run == run.key:
                    self.boards[board].run = None
            self._sync_board_status(board)
            self.wake()

    def _progress(self, run: RunState, dtype: DeviceType, kind: str, data: dict[str, Any]) -> None:
        status: dict[str, Any] = {}
        if kind == "Acquired":  # an attempt counts once the place is really ours
            status["attempts"] = int(run.status.get("attempts") or 0) + 1
            metrics.QUEUE_WAIT.observe(max(0.0, time.time() - run.created))
            status["startTime"] = now_iso()
        if "progress" in data:
            status["progress"] = data["progress"]
        if "boots" in data:
            values = [b[dtype.boot.headline] for b in data["boots"] if dtype.boot.headline in b]
            if values:
                status["bootSeconds"] = seed_format(values)
        if status:
            self._patch(run, status)

    def _complete(self, run: RunState, dtype: DeviceType, board: str, suites: list[SuiteSpec],
                  result: SessionResult, prefix: str) -> None:
        steps = [(s.name, s.suite) for s in suites]
        results = summary(result.boots, dtype.boot.headline, result.records, steps)
        failed = sorted({r.step for r in result.records if not r.ok})
        run_info = {"namespace": run.namespace, "name": run.name, "uid": run.uid, "board": board,
                    "deviceType": dtype.name, "plan": run.spec.plan or "(inline)",
                    "iterations": run.spec.iterations, "bootCycles": run.spec.bootCycles,
                    "uname": result.provenance.get("uname"),
                    "result": "suites failed: " + ", ".join(failed) if failed else "all suites passed"}
        doc = metrics_document(run_info, result.boots, result.records)
        doc["provenance"] = result.provenance
        doc["bootEvents"] = result.boot_events
        doc["powerOnTimes"] = result.power_on_times
        if result.evidence:
            doc["evidence"] = result.evidence
        comparison_md, regression = self._compare_with_baseline(run, doc)
        report_md = markdown(doc) + ("\n" + comparison_md if comparison_md else "")
        urls = [self.store.put(f"{prefix}/serial.log", result.serial_log, "text/plain"),
                self.store.put(f"{prefix}/metrics.json", json.dumps(doc, indent=2).encode(),
                               "application/json"),
                self.store.put(f"{prefix}/report.md", report_md.encode(), "text/markdown"),
                self.store.put(f"{prefix}/report.rst", rst(doc).encode(), "text/x-rst"),
                self.store.put(f"{prefix}/report.html", html(doc).encode(), "text/html")]
        urls.append(self.store.url(f"{prefix}/raw/"))
        status = {"results": results, "artifacts": urls, "provenance": result.provenance,
                  "progress": f"done ({len(result.records)} suite runs)"}
        if regression is not None:
            status["conditions"] = set_condition(run.status.get("conditions"), "Regressed",
                                                 *regression, run.generation)
        self._patch(run, status)
        if regression is not None and regression[0] == "True":
            self.kube.event(run.ref(), "Warning", "Regressed", regression[2])
        if failed:
            self._finish(run, FAILED, "SuitesFailed",
                         f"{len(failed)} suite(s) failed: {', '.join(failed)}; see report.md")
        else:
            self._finish(run, SUCCEEDED, "Completed",
                         f"{len(result.boots)} boot(s) timed and {len(result.records)} suite runs "
                         f"on {board}")

    def _compare_with_baseline(self, run: RunState, doc: dict[str, Any]
                               ) -> tuple[str, tuple[str, str, str] | None]:
        """Compare with spec.baseline (a finished run in the same namespace), if any."""
        if not run.spec.baseline:
            return "", None
        base = self.kube.get_run(run.namespace, run.spec.baseline)
        if base is None or (base.get("status") or {}).get("phase") not in FINISHED:
            return "", ("Unknown", "BaselineUnavailable",
                        f"baseline run {run.spec.baseline} not found or not finished")
        prefix = self.store.run_prefix(run.namespace, run.spec.baseline, base["metadata"]["uid"],
                                       base["spec"].get("artifactPrefix", ""))
        try:
            base_doc = json.loads(self.store.get(f"{prefix}/metrics.json"))
        except InfraError as exc:
            return "", ("Unknown", "BaselineUnavailable", f"baseline metrics unreadable: {exc}")
        current, direction = samples_from_document(doc)
        baseline, _ = samples_from_document(base_doc)
        rules = self.policy.regression

        def thresholds(t: Any) -> Thresholds:
            return Thresholds(alpha=t.alpha, min_effect=t.minEffect, tolerance=t.tolerance)
        policy = RegressionPolicy(thresholds(rules.default),
                                  {k: thresholds(v) for k, v in rules.families.items()})
        comparisons = compare(baseline, current, direction, policy)
        doc["comparison"] = {"baseline": run.spec.baseline, "rule": policy.describe(),
                             "rows": [{"key": c.key, "verdict": c.verdict, "change": c.change,
                                       "baseline": c.baseline.display,
                                       "current": c.current.display, "evidence": c.evidence}
                                      for c in comparisons]}
        table = comparison_markdown(comparisons, policy.describe(), f"run {run.spec.baseline}")
        bad = [c for c in comparisons if c.verdict == "regressed"]
        if bad:
            return table, ("True", "MetricsRegressed",
                           f"{len(bad)} metric(s) worse than {run.spec.baseline}: "
                           + worst_offenders(comparisons))
        return table, ("False", "NoRegression",
                       f"{len(comparisons)} metric(s) compared with {run.spec.baseline}; none worse")

    def _finish(self, run: RunState, phase: str, reason: str, message: str) -> None:
        ok = "True" if phase == SUCCEEDED else "False"
        metrics.FINISHED.labels(phase, reason).inc()
        try:
            self._patch(run, {
                "phase": phase, "completionTime": now_iso(), "queuePosition": None,
                "observedGeneration": run.generation,
                "conditions": set_condition(run.status.get("conditions"), "Succeeded", ok, reason,
                                            message, run.generation)})
        except Cancelled:
            return
        self.kube.event(run.ref(), "Normal" if ok == "True" else "Warning", reason, message)

    def _requeue(self, run: RunState, message: str, avoid: str | None) -> None:
        avoid_list = list(run.status.get("avoidBoards") or [])
        if avoid and avoid not in avoid_list:
            avoid_list.append(avoid)
        try:
            self._patch(run, {"phase": PENDING, "board": None, "progress": "re-queued",
                              "avoidBoards": avoid_list,
                              "conditions": set_condition(run.status.get("conditions"), "Scheduled",
                                                          "False", "Requeued", message,
                                                          run.generation)})
        except Cancelled:
            return
        self.kube.event(run.ref(), "Normal", "Requeued", message)

    def _infra_failure(self, run: RunState, board: str, exc: InfraError,
                       session: BoardSession | None) -> None:
        log.warning("%s: infrastructure error on %s: %s", run.key, board, exc)
        self._upload_partial_log(run, session)
        quarantined = self._board_failed(board, exc)
        attempts = int(run.status.get("attempts") or 1)
        avoid = set(run.status.get("avoidBoards") or []) | {board}
        with self.lock:
            others = [self._board_view(b) for b in self.boards.values()
                      if b.device_type and b.name not in avoid]
        elsewhere = q.could_ever_match(self._selector(run.spec), others)
        if attempts <= self.policy.maxInfraRetries and elsewhere:
            extra = f"; board {board} quarantined" if quarantined else ""
            self._requeue(run, f"infrastructure error on {board} ({exc.reason}: {exc}){extra}; "
                               f"retrying on another board", avoid=board)
        else:
            why = "" if elsewhere else "; no other matching board to retry on"
            self._finish(run, FAILED, exc.reason,
                         f"infrastructure error: {exc} (after {attempts} attempt(s){why})")

    def _upload_partial_log(self, run: RunState, session: BoardSession | None) -> None:
        if session is None:
            return
        try:
            prefix = self.store.run_prefix(run.namespace, run.name, run.uid, run.spec.artifactPrefix)
            attempt = run.status.get("attempts") or 1
            self.store.put(f"{prefix}/serial-attempt-{attempt}.log", session.serial_log.bytes(),
                           "text/plain")
        except InfraError:
            log.warning("could not upload the partial serial log of %s", run.key)

    def _cancelled(self, run: RunState, session: BoardSession | None) -> None:
        self._upload_partial_log(run, session)
        if not run.deleting:
            self._finish(run, CANCELLED, "Cancelled", "cancelled by spec.cancel")

    # -- cancel and delete --------------------------------------------------------------------
    def cancel(self, key: str, *, deleting: bool = False) -> None:
        """Stop a run now: fence its session, power the board off, release it (blocking)."""
        with self.lock:
            run = self.runs.get(key)
            session = self.sessions.get(key)
            if run is not None and deleting:
                run.deleting = True
        if session is not None:
            session.fence()
            place = session.request.place
            self._power_off_and_release(place)
            with self.lock:
                if self.boards.get(place) and self.boards[place].run == key:
                    self.boards[place].run = None
            self._sync_board_status(place)
            self.wake()
        elif run is not None and not deleting and run.phase in (PENDING, None):
            self._finish(run, CANCELLED, "Cancelled", "cancelled before it started")

    def _power_off_and_release(self, place: str) -> None:
        try:
            info = self.coordinator.places().get(place)
            if info is not None and info.acquired == self.coordinator.identity:
                dt = self.device_types.get(info.tags.get("device_type", ""))
                if dt is not None:
                    board = Board(place, info.resources, dt)
                    try:
                        board.power_off()
                    finally:
                        board.close()
            self.coordinator.release(place)
        except Exception:
            log.warning("could not power off / release %s", place, exc_info=True)

    # -- boards -------------------------------------------------------------------------------
    def _refresh_boards(self, force: bool = False) -> None:
        places = self._places_or_none()
        self.last_refresh = time.monotonic()
        if places is None:
            return
        for name, place in places.items():
            with self.lock:
                rec = self.boards.get(name)
                if rec is None:
                    rec = self.boards[name] = BoardRecord(name)
                    self.kube.create_board(name, {"benchfarm.io/device-type":
                                                  place.tags.get("device_type", "unknown")})
                rec.device_type = place.tags.get("device_type", "")
                rec.labels = {k: v for k, v in place.tags.items() if k != "device_type"}
                rec.online = bool(place.resources) and rec.device_type in self.device_types
                ours = place.acquired == self.coordinator.identity
                rec.held_by_other = None if (place.free or ours) else \
                    (place.acquired or f"reserved {place.reserved_by}")
            self._sync_board_status(name)
        self.inventory_known = True

    def _sync_board_status(self, name: str) -> None:
        with self.lock:
            rec = self.boards.get(name)
            if rec is None:
                return
            status = {"deviceType": rec.device_type, "labels": rec.labels, "state": rec.state,
                      "run": rec.run or (f"labgrid: {rec.held_by_other}" if rec.held_by_other
                                         else None),
                      "consecutiveInfraFailures": rec.failures, "reason": rec.reason,
                      "quarantinedAt": datetime.fromtimestamp(rec.quarantined_since, timezone.utc)
                      .strftime("%Y-%m-%dT%H:%M:%SZ") if rec.quarantined_since else None}
            if status == rec.last_status:
                return
            rec.last_status = status
        self.kube.patch_board_status(name, status)

    def _board_ok(self, board: str) -> None:
        with self.lock:
            rec = self.boards[board]
            rec.failures = 0
            rec.reason = None

    def _board_failed(self, board: str, exc: InfraError) -> bool:
        with self.lock:
            rec = self.boards[board]
            metrics.INFRA_FAILURES.labels(board, exc.reason).inc()
            rec.failures += 1
            rec.reason = f"{exc.reason}: {exc}"[:500]
            if rec.failures >= self.policy.quarantineAfterFailures and rec.quarantined_since is None:
                rec.quarantined_since = time.time()
                quarantined = True
            else:
                quarantined = False
        self._sync_board_status(board)
        if quarantined:
            self.kube.event({"apiVersion": "benchfarm.io/v1alpha1", "kind": "Board",
                             "metadata": {"name": board}},
                            "Warning", "Quarantined",
                            f"{board} quarantined after {rec.failures} infrastructure failures: "
                            f"{rec.reason}")
        return quarantined

    def _health_checks(self) -> None:
        now = time.time()
        with self.lock:
            due = [b for b in self.boards.values()
                   if b.quarantined_since is not None and not b.run and not b.held_by_other
                   and b.online and b.name not in self.health_checks
                   and now - b.quarantined_since >= self.policy.quarantineCooldownSeconds]
            for b in due:
                self.health_checks.add(b.name)
                b.run = "(health check)"
        for b in due:
            self.executor.submit(lambda b=b: self._health_check(b.name))

    def _health_check(self, name: str) -> None:
        """Boot a quarantined board to its prompt; back to Idle if it makes it."""
        ok = False
        try:
            dt = self.device_types[self.boards[name].device_type]
            self.coordinator.acquire(name)
            try:
                info = self.coordinator.places()[name]
                board = Board(name, info.resources, dt)
                try:
                    board.boot()
                    ok = True
                finally:
                    try:
                        board.power_off()
                    finally:
                        board.close()
            finally:
                self.coordinator.release(name)
        except Exception as exc:
            log.info("health check of %s failed: %s", name, exc)
            with self.lock:
                self.boards[name].reason = f"health check failed: {exc}"[:500]
        with self.lock:
            rec = self.boards[name]
            rec.run = None
            if ok:
                rec.quarantined_since, rec.failures, rec.reason = None, 0, None
            else:
                rec.quarantined_since = time.time()
            self.health_checks.discard(name)
        self._sync_board_status(name)
        self.kube.event({"apiVersion": "benchfarm.io/v1alpha1", "kind": "Board",
                         "metadata": {"name": name}},
                        "Normal" if ok else "Warning",
                        "HealthCheckPassed" if ok else "HealthCheckFailed",
                        f"{name} {'booted to its prompt; back in service' if ok else 'still fails'}")
        self.wake()
