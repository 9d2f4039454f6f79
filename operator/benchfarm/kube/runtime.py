"""The operator's registry and scheduling loop, between kopf's handlers and the lab.

kopf feeds every BenchmarkRun, Board and LabPolicy it sees into this registry; a loop on kopf's
event loop asks `core.queue` who goes next and hands each decision to the session supervisor,
which writes it to the run's status and launches a runner. The operator never touches a board:
sessions run in their own processes (`kube.launchers`), prove they are alive with Leases and are
adopted, not restarted, when the operator itself restarts. Who takes a session seat and which
seat a standby run is named are `core.seats`'s decisions (pure); what each of a run's
transitions writes to its status is `core.transitions`'s.

The runtime builds the inventory, the session supervisor and admission and hands each itself,
typed by the narrow Protocol that module declares (`inventory.InventoryRuntime`,
`sessions.SessionRuntime`, `admission.AdmissionRuntime`): they never import the runtime, and
mypy checks here that the runtime is each of them. The import contracts in pyproject.toml keep
`kube` in layers, without cycles.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import ValidationError

from .. import cpu
from ..api.campaigns import AVOID_ANNOTATION
from ..api.devicetype import DeviceType
from ..api.grants import GO_AHEAD_FIELD, Relay
from ..api.models import BenchmarkRunSpec, LabPolicySpec
from ..api.notifications import Event
from ..api.outcomes import FINISHED, Phase, Reason, RunFailure, Underway, attempt_of
from ..core import notify as n, queue as q, rounds, seats, transitions, trust
from ..errors import InfraError, Party, RunError
from ..history.db import Database
from ..history.outbox import Outbox
from ..kubeapi import versions
from ..kubeapi.client import API_FAILURES, Kube, PreconditionFailed
from ..lab.coordinator import Coordinator, run_holder
from ..lab.devicetypes import load_device_types
from ..notify.mail import SmtpSettings
from ..settings import Settings
from ..store.artifacts import ArtifactStore, StoreConfig
from ..store.software import internal_from_env
from . import admission, launchers, metrics
from .fairness import FairnessBook
from .heap import HeapTender
from .indexer import Indexer
from .inventory import Inventory
from .leases import Leases
from .locking import WatchedLock
from .notifier import Notifier
from .ports import LAUNCH_FAILURES, Launch
from .reachability import Reachability
from .sessions import Supervisor
from .state import InFlight, RunIndex, RunState, ts
from .workers import Workers

log = logging.getLogger("benchfarm")

QUEUE_POSITION_LIMIT = 2     # only the head of the queue: the next two waiting runs
QUEUE_POSITION_WRITES = 2    # and at most two position writes per run (the write budget of a run)
QUEUE_POSITION_PERIOD = 5.0
BOARD_GAUGES_EVERY = 1.0     # seconds between two counts of the boards by state (metrics)
POLICY_NAME = "default"      # the one LabPolicy the lab has (CEL refuses any other name)
SLOW_ROUND = 0.05            # seconds: a round longer than this is logged (with what it waited for)
SLOW_ITERATION = 2.0         # seconds: a scheduler iteration longer than this is logged
LAUNCH_THREADS = 4           # launches in flight at once (each mostly waits for the API server)
# seconds a thread may keep the GIL once another asks for it (Python's default: 0.005). A round
# that waits for the GIL waits that long for each thread handed the GIL before it: in a full
# `make bench-scale` a round waited 51 ms for the GIL with 1 ms of its own CPU and none of it
# for a CPU; at 1 ms, three full benches in a row had no round over 36 ms
GIL_SWITCH = 0.001


def _first_in_line(priority: int) -> None:
    """The scheduling thread's start: first in line for a CPU where asked and allowed."""
    if priority and not cpu.first_in_line(priority):
        log.info("the scheduling thread stays time-shared: this host does not let it take "
                 "real-time priority %d (BENCHFARM_SCHEDULER_RTPRIO)", priority)


def avoid_annotation(meta: dict[str, Any]) -> tuple[str, ...]:
    """A campaign's retried column: the boards its first run failed on (at most a few names)."""
    text = ((meta.get("annotations") or {}).get(AVOID_ANNOTATION) or "")[:1024]
    return tuple(b for b in text.split(",") if b)[:16]


_BOARD_IS_FINE = frozenset(r.value for r in Reason if r.board_is_fine)


class Runtime:
    def __init__(self, settings: Settings, kube: Kube, coordinator: Coordinator,
                 store: ArtifactStore, device_types: dict[str, DeviceType],
                 launcher: launchers.Launcher, signing_key: bytes = b"",
                 internal: tuple[Any, ...] = (), indexer: Indexer | None = None) -> None:
        self.settings = settings
        self.kube = kube
        self.indexer = indexer            # finished runs into the results database, if there is one
        if indexer is not None:
            indexer.notify = self.notify  # its change points, to Notifications
        self.notifier: Notifier | None = None   # Notifications' deliveries, from their outbox
        self.signing_key = signing_key    # signs what sessions execute (core.trust)
        self.internal = internal          # the lab's internal ranges: no software from there
        self.coordinator = coordinator
        self.store = store
        self.device_types = device_types
        self.launcher = launcher
        self.runs: dict[str, RunState] = {}
        self.index = RunIndex()        # what a round reads; kept current by `reindex`
        self.policy = LabPolicySpec()
        self.fairness = q.RoundRobinFairness()
        self.lock = WatchedLock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.wake_event: asyncio.Event | None = None
        self.task: asyncio.Task[None] | None = None
        self.inventory_known = False
        self.positions: dict[str, int | None] = {}
        self.last_positions_at = 0.0
        self.boards_counted_at = 0.0
        self.inventory = Inventory(self)
        self.sessions = Supervisor(self)
        self.namespace = settings.namespace
        # sessions that may hold a board at once (the host's or the cluster's capacity); None: no
        # limit. A board goes only to a run whose session starts right away or on standby.
        self.max_sessions = settings.max_sessions
        # sessions launched beyond that limit, on standby: each gets ready (its Lease, its
        # connection, its software) and takes its board when the seat it was named is released
        # (a relay, `api.grants.Relay`: one coordinator update), or on the go-ahead a round
        # writes for a seat freed with no heir (`api.grants.GoAhead`). A standby run's board is
        # kept for it meanwhile.
        self.standby_max = settings.standby_sessions
        self.naming: set[str] = set()     # standby runs whose relay is being written
        self.seat_seconds: float | None = None   # how long a session holds its seat (a mean)
        # the scheduler's own thread: never queued behind a flood of admissions (which run on
        # asyncio's default executor, a few threads for the whole operator)
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scheduler",
                                           initializer=_first_in_line,
                                           initargs=(settings.scheduler_rtprio,))
        self.launches = Workers(max_workers=LAUNCH_THREADS, thread_name_prefix="launch")
        # what a round decided but no run waits for (fairness, queue positions), written here:
        # the next round never waits for an API round trip
        self.writer = Workers(max_workers=1, thread_name_prefix="round-writes")
        self.fairness_book = FairnessBook(kube, settings.namespace, self.fairness, self.lock,
                                          self.writer)
        self.supervising = threading.Lock()
        self.heap = HeapTender()
        self.leases = Leases(self)
        # whether the store and the database answer, for the alerts (one attempt per probe)
        probes = {Party.store: ArtifactStore(store.config, attempts=1).ping}
        if indexer is not None:
            probes[Party.database] = indexer.db.ping
        self.reachability = Reachability(probes)

    @property
    def boards(self) -> dict[str, Any]:
        return self.inventory.boards

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def from_settings(cls, settings: Settings) -> Runtime:
        device_types = load_device_types(settings.device_types)
        coordinator = Coordinator(settings.coordinator, user=settings.labgrid_user,
                                  host=settings.labgrid_host)
        store = ArtifactStore(StoreConfig.from_env(settings))
        try:
            key = trust.key_from(settings.environ)
        except ValueError as exc:
            raise SystemExit(str(exc)) from exc
        try:
            notify_settings = n.NotifySettings.from_environ(settings.environ)
        except ValueError as exc:
            raise SystemExit(str(exc)) from exc
        kube = Kube()
        url = settings.database_url
        db = Database(url) if url else None
        indexer = Indexer(db, store, kube) if db is not None else None
        rt = cls(settings, kube, coordinator, store, device_types,
                 launchers.from_settings(settings, kube), signing_key=key,
                 internal=internal_from_env(settings), indexer=indexer)
        # its own API client, with a short outage budget: it waits an outage out itself
        rt.notifier = Notifier(Outbox(db) if db is not None else None, Kube(outage_budget=10.0),
                               notify_settings, SmtpSettings.from_environ(settings.environ),
                               rt.namespace, lambda: rt.policy, store)
        return rt

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        sys.setswitchinterval(GIL_SWITCH)
        self.loop = asyncio.get_running_loop()
        self.wake_event = asyncio.Event()
        if self.indexer is not None:
            self.indexer.start()
        self.reachability.start()
        if self.notifier is not None:
            self.notifier.start()
        t0 = time.monotonic()
        await asyncio.to_thread(self._recover)
        metrics.RECOVERY.set(time.monotonic() - t0)
        metrics.watch_collections()
        self.task = asyncio.create_task(self._scheduler_loop(), name="benchfarm-scheduler")

    async def stop(self) -> None:
        if self.task:
            self.task.cancel()
        # the step the scheduler thread is in (a launch, a round) ends before the operator does
        await asyncio.to_thread(self.executor.shutdown, True)
        await asyncio.to_thread(self.launches.shutdown, True)
        await asyncio.to_thread(self.writer.shutdown, True)
        await asyncio.to_thread(self.inventory.close)
        await asyncio.to_thread(self.coordinator.close)
        await asyncio.to_thread(self.reachability.stop)
        if self.notifier is not None:
            await asyncio.to_thread(self.notifier.stop)
        if self.indexer is not None:
            await asyncio.to_thread(self.indexer.stop)

    def wake(self) -> None:
        if self.loop is not None and self.wake_event is not None:
            self.loop.call_soon_threadsafe(self.wake_event.set)

    def _recover(self) -> None:
        """After a (re)start: read everything back; running sessions are adopted, not redone."""
        self.store.ensure_bucket()
        self.inventory.load()
        policy = self.kube.get_cluster("labpolicies", POLICY_NAME)
        self.policy = LabPolicySpec(**(policy or {}).get("spec") or {})
        self.fairness_book.load()
        if self.notifier is not None:     # before the runs: their events are matched to these
            self.notifier.load()
        adopted = 0
        for body in self.kube.list_runs_paged():
            self.observe_run("ADDED", body)
            adopted += (body.get("status") or {}).get("phase") == Phase.running
        if adopted:
            log.info("adopted %d running session(s); their Leases say whether they live", adopted)
        self.leases.recover()
        self.inventory.refresh(force=True)

    # -- registry (fed by kopf) ---------------------------------------------------------------
    def observe_run(self, event_type: str | None, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if event_type == "DELETED":
            with self.lock:
                run = self.runs.pop(key, None)
                self.index.forget(key)
            if run is not None:
                self.inventory.free(run.status.get("board"), key)
            return
        try:
            spec = BenchmarkRunSpec(**(body.get("spec") or {}))
        except ValidationError:  # invalid bodies are rejected by admission; ignore them here
            return
        status = dict(body.get("status") or {})
        with self.lock:
            current = self.runs.get(key)
            if current is not None and current.uid == meta["uid"]:
                if current.stale(body):       # the operator's own later write stands
                    metrics.STALE_EVENTS.inc()
                    return
                current.version = versions.of(body)
                current.spec = spec
                current.generation = meta.get("generation", 1)
                current.deleting = bool(meta.get("deletionTimestamp"))
                # our own in-flight transitions win over an older watch event
                if not (current.starting and status.get("phase") == Phase.pending):
                    current.status = status
                run = current
            else:
                run = self.runs[key] = RunState(meta["namespace"], meta["name"], meta["uid"],
                                                meta.get("generation", 1),
                                                ts(meta.get("creationTimestamp")), spec, status,
                                                deleting=bool(meta.get("deletionTimestamp")),
                                                avoid_boards=avoid_annotation(meta),
                                                version=versions.of(body))
        board = status.get("board")
        if board:
            if run.phase == Phase.running and not status.get("boardReleased"):
                self.inventory.claim(board, key)          # adopted after a restart, too
            else:
                self.inventory.free(board, key)
                cond: dict[str, Any] = next((c for c in status.get("conditions") or []
                             if c.get("type") == "Succeeded"), {})
                if run.phase == Phase.succeeded or cond.get("reason") in _BOARD_IS_FINE:
                    self.inventory.board_ok(board)
        with self.lock:
            self.reindex(run)
        if self.indexer is not None and run.phase in FINISHED:
            self.indexer.finished(run.namespace, run.name, run.uid, status)
        if self.notifier is not None and run.phase in FINISHED:
            self.notifier.run_seen(body)
        self.wake()

    def observe_board(self, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        with self.lock:
            rec = self.inventory.boards.get(name)
            drained = rec is not None and rec.maintenance != bool(
                (body.get("spec") or {}).get("maintenance"))
            if rec is not None:
                rec.maintenance = bool((body.get("spec") or {}).get("maintenance"))
                rec.uid = body["metadata"].get("uid", rec.uid)
        if drained:   # its state (Maintenance, or back) now: a refresh walks a free place that
            self.inventory.sync(name)   # did not change at the coordinator only every minute
        self.inventory.observe_health(name, dict(body.get("status") or {}))
        self.wake()

    def observe_policy(self, body: dict[str, Any], deleted: bool = False) -> None:
        """The LabPolicy `default` changed (or went: the built-in defaults apply). Any other
        LabPolicy is ignored, with a warning: sessions read only `default` too."""
        name = body["metadata"]["name"]
        if name != POLICY_NAME:
            log.warning("LabPolicy %r is ignored: the lab reads only the one named %r", name,
                        POLICY_NAME)
            if not deleted:
                self.kube.event(body, "Warning", "PolicyIgnored",
                                f"only the LabPolicy named {POLICY_NAME!r} is in force")
            return
        policy = LabPolicySpec() if deleted else LabPolicySpec(**body.get("spec") or {})
        with self.lock:
            changed, self.policy = policy != self.policy, policy
            if changed and self.notifier is not None:   # webhookHosts: Ready again
                self.notifier.policy_changed()
            if changed:   # priority ceilings: every waiting entry's place in the queue may move
                for key in list(self.index.queue.keys()):
                    if key in self.runs:
                        self.reindex(self.runs[key])
                    else:
                        self.leases.reindex(self.leases.leases[key])
        self.wake()

    def admit(self, body: dict[str, Any]) -> None:
        admission.admit(self, body)

    def notify(self, event: Event) -> None:
        """Something a Notification may subscribe to happened (never waits: `kube.notifier`)."""
        if self.notifier is not None:
            self.notifier.emit(event)

    @staticmethod
    def selector(spec: BenchmarkRunSpec) -> q.Selector:
        return q.Selector.of(spec.selector.deviceType, spec.selector.labels, spec.selector.board)

    # -- scheduling ---------------------------------------------------------------------------
    async def _scheduler_loop(self) -> None:
        assert self.wake_event is not None
        while True:
            due = self.leases.next_wake(time.time())    # a lease's warning or end, on time
            try:
                await asyncio.wait_for(self.wake_event.wait(),
                                       timeout=2.0 if due is None else min(2.0, due + 0.01))
            except TimeoutError:
                pass
            self.wake_event.clear()
            loop = asyncio.get_running_loop()
            try:
                t = [time.monotonic()]
                for step in (self.inventory.refresh, self._schedule_round, self._supervise_soon,
                             self.heap.tend):
                    await loop.run_in_executor(self.executor, step)
                    t.append(time.monotonic())
                if t[-1] - t[0] > SLOW_ITERATION:
                    log.warning("a slow scheduler iteration: %.1f s (inventory %.1f, round %.1f, "
                                "heap %.1f)", t[4] - t[0], t[1] - t[0], t[2] - t[1],
                                t[4] - t[3])
            except asyncio.CancelledError:
                raise
            except Exception:
                metrics.bug(log, "scheduler round failed; retrying")
                await asyncio.sleep(1)

    def _supervise_soon(self) -> None:
        """Session supervision (it lists the session Leases: an API round trip, seconds on a
        busy API server) on a launch thread, one at a time: the round a freed board wakes never
        waits behind it."""
        if not self.supervising.acquire(blocking=False):
            return

        def supervise() -> None:
            try:
                self.sessions.supervise()
            except Exception:
                metrics.bug(log, "supervising the sessions failed; again at the next iteration")
            finally:
                self.supervising.release()
        self.launches.submit(supervise)

    def _schedule_round(self) -> None:
        """One round: `core.rounds.plan` decides under the lock, `_apply` changes the records
        at once; the writes the decisions need go to the launch threads after the lock."""
        now = time.time()
        t0, c0, g0 = time.perf_counter(), time.thread_time(), metrics.full_collections()
        q0 = metrics.runqueue_wait()
        positions_due = time.monotonic() - self.last_positions_at >= QUEUE_POSITION_PERIOD
        with self.lock.first():      # kopf's threads, taking it one after another, wait
            locked = time.perf_counter()
            waited = self.lock.waited(t0, locked)    # before its own hold is over
            mono = time.monotonic()
            plan = rounds.plan(
                self.index.active.values(),
                leases_ns=[held.namespace for held in self.index.leases.values()],
                queue=self.index.queue, free=self.inventory.board_index(),
                max_sessions=self.max_sessions, standby_max=self.standby_max,
                seat_seconds=self.seat_seconds, naming=self.naming,
                launched=self.sessions.launched, standing_by=self.seat_of,
                holds_place=self._holds_place,
                max_boards=lambda ns: self.policy.for_namespace(ns).maxBoards,
                fairness=self.fairness, now=now, mono=mono, positions_due=positions_due,
                head=QUEUE_POSITION_LIMIT, runs=self.runs)
            named = self._apply(plan, mono)
            queue = self.index.queue
            waiting, active, oldest = len(queue), len(self.index.active), queue.oldest()
            timeouts = list(self.index.queue_timeouts.values())
            ttl = list(self.index.ttl.values())
        wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
        metrics.observe_round(wall, cpu, collected=metrics.full_collections() != g0)
        if wall > SLOW_ROUND:
            other, gil, holder = waited
            log.info("a slow round: %.0f ms (waiting for the lock %.0f ms%s, then for the GIL "
                     "%.0f ms; for a CPU %.0f ms in all, its own CPU %.0f ms; %d assignment(s))",
                     wall * 1000, other * 1000, f" held by {holder}" if holder else "", gil * 1000,
                     (metrics.runqueue_wait() - q0) * 1000, cpu * 1000,
                     len(plan.launches) + len(plan.grants))
        for run in plan.go_aheads:
            self.launches.submit(self._go_ahead, run)
        for run in plan.relay_checks:
            self.launches.submit(self._check_relay, run)
        for run, relay in named:
            self.launches.submit(self._name_relay, run, relay)
        for launch in plan.launches:
            self.launches.submit(self._launch, launch.run, launch.board)
        for key, board in plan.grants:
            self.launches.submit(self.leases.grant, self.leases.leases[key], board)
        self.fairness_book.save()
        metrics.observe_lab(waiting, active, standby=len(plan.standby),
                            oldest_wait=0.0 if oldest is None else max(0.0, now - oldest))
        # the boards by state, for the gauges a scrape reads: a walk of all 1,000 boards after
        # every round of a flood (50 a second) was 3 % of the time the operator's threads held
        # the GIL in a full bench (py-spy --gil), the time a round may wait for it
        if mono - self.boards_counted_at >= BOARD_GAUGES_EVERY:
            self.boards_counted_at = mono
            boards = list(self.boards.values())      # one C call: whole, whatever adds one
            metrics.observe_boards(Counter(b.state for b in boards), active)
        self._expire(timeouts, now)
        if positions_due and plan.order is not None:
            self._publish_positions(plan.order)
        self.inventory.health_checks()
        self.leases.tend(now)
        self._ttl(ttl, now)

    def _apply(self, plan: rounds.RoundPlan[RunState], mono: float) -> list[tuple[RunState, Relay]]:
        """A round's decisions, into the records (under the lock): what is on its way is marked
        (`InFlight`, `naming`), so the next round does not decide it again before its write.
        Returns the relays named, for their writes."""
        for r, relay in plan.afters:
            r.after = relay
        for r in plan.seats_freed:
            r.seated_at = 0.0
        self.seat_seconds = plan.seat_seconds
        for r in plan.relays_taken:
            r.relayed_at = r.seated_at = mono
        metrics.SEATS.labels("relay").inc(len(plan.relays_taken))
        for r in plan.relay_checks:
            r.relay_checked = True
        for r in plan.go_aheads:
            r.move(InFlight.go_ahead)
            r.seated_at = mono
        metrics.SEATS.labels("go-ahead").inc(len(plan.go_aheads))
        named = []
        for r, heir in plan.relays:
            r.after = self._relay_to(heir)
            self.naming.add(r.key)      # no go-ahead meanwhile: it could land first
            named.append((r, r.after))
        for launch in plan.launches:
            run = launch.run
            self.boards[launch.board].run = run.key
            run.move(InFlight.launch_seated if launch.seated else InFlight.launch_standby)
            run.seated_at, run.relayed_at, run.relay_checked = mono, None, False
            run.after = None if launch.heir is None else self._relay_to(launch.heir)
            self.reindex(run)
        for key, board in plan.grants:
            self.boards[board].run = key
            lease = self.leases.leases[key]
            lease.starting = True
            self.leases.reindex(lease)
        return named

    def seat_of(self, r: RunState) -> tuple[bool, Relay | None]:
        """Is the run on standby, and which relay names its seat (`core.seats.standing_by`,
        under the lock)?"""
        return seats.standing_by(
            r, naming=r.key in self.naming, holds_board=r.phase == Phase.running and not r.released,
            go_ahead=lambda: trust.read_go_ahead(self.signing_key, r.uid, attempt_of(r.status),
                                                 r.status.get(GO_AHEAD_FIELD)),
            seat_held=self._seat_held)

    def standing_by(self, r: RunState) -> bool:
        """On standby (under the lock)."""
        return self.seat_of(r)[0]

    def _seat_held(self, relay: Relay) -> bool:
        """Does the run a relay names still hold its seat (its board not released, its run not
        over)? Once not, the seat is the standby run's, whether its session saw it or not."""
        rec = self.boards.get(relay.place)
        holder = self.runs.get(rec.run) if rec is not None and rec.run else None
        return holder is not None and holder.phase == Phase.running and \
            run_holder(holder.uid) == relay.holder and \
            not holder.status.get("boardReleased")

    def _holds_place(self, r: RunState) -> bool:
        """The coordinator showed the run's place acquired by its session (the last refresh): a
        relay may name it, the place's release is then that session's."""
        rec = self.boards.get(r.status.get("board") or "")
        return rec is not None and rec.holder == run_holder(r.uid)

    def _relay_to(self, heir: RunState) -> Relay:
        return Relay(place=heir.status["board"], holder=run_holder(heir.uid))

    def _check_relay(self, run: RunState) -> None:
        """A relay's seat went to this run `core.seats.RELAY_GRACE` ago: if its session has not
        taken its place, it did not see the release (its connection came up after it), and it
        gets the plain go-ahead (one coordinator read, on a launch thread)."""
        place = run.status.get("board") or ""
        try:
            if self.coordinator.holder(place) == run_holder(run.uid):
                return
        except InfraError as exc:      # the coordinator is away: the go-ahead says it anyway
            log.info("%s: could not read who holds %s: %s", run.key, place, exc)
        with self.lock:
            if run.after is None or run.status.get("boardReleased") or \
                    self.runs.get(run.key) is not run or not run.move(InFlight.go_ahead):
                return
        metrics.RELAYS_MISSED.inc()
        log.info("%s: its session did not take the seat %s gave up; writing its go-ahead",
                 run.key, run.after.place)
        self._go_ahead(run)

    def _name_relay(self, run: RunState, relay: Relay) -> None:
        """A standby run's relay, named in a round after its launch (one status write)."""
        try:
            self.patch(run, transitions.relay(trust.sign_go_ahead(
                self.signing_key, run.uid, attempt_of(run.status), relay)))
        except API_FAILURES as exc:   # deleted meanwhile, or the API is away: the next round again
            log.info("%s: could not write its relay: %s", run.key, exc)
            with self.lock:
                if run.after == relay:
                    run.after = None
        finally:
            with self.lock:
                self.naming.discard(run.key)

    def _go_ahead(self, run: RunState) -> None:
        """A seat is free: the standby run's session may take its board (one status write; the
        session's watch of its run brings it there)."""
        attempt = attempt_of(run.status)
        try:
            self.patch(run, transitions.go_ahead(
                trust.sign_go_ahead(self.signing_key, run.uid, attempt)))
        except API_FAILURES as exc:   # deleted meanwhile, or the API is away: the next round again
            log.info("%s: could not write its go-ahead: %s", run.key, exc)
        finally:
            with self.lock:
                run.move(InFlight.none)
                self.reindex(run)      # handed back meanwhile: in the queue from now
            self.wake()

    def _launch(self, run: RunState, board: str) -> None:
        """One assignment's launch (its guarded Running write, the launcher, the Scheduled
        event: API round trips, a few hundred ms on a busy API server), on its own thread: the
        boards freed together start together, and the next round does not wait for them (the
        run counts as holding its board, or as on standby, while `starting`)."""
        try:
            self.sessions.launch(run, board, seated=run.in_flight is InFlight.launch_seated,
                                 after=run.after)
        except LAUNCH_FAILURES as exc:    # an outage, the run deleted: it waits again
            log.error("%s: launching its session failed: %s", run.key, exc)
            self._launch_failed(run, board)
        except Exception:                 # this thread's last handler
            metrics.bug(log, "%s: launching its session failed", run.key)
            self._launch_failed(run, board)

    def _launch_failed(self, run: RunState, board: str) -> None:
        """The run waits again, its board free for the next round."""
        with self.lock:
            run.move(InFlight.none)
            self.reindex(run)
        self.inventory.free(board, run.key)
        self.wake()

    def launch_session(self, req: Launch) -> str:
        """A session other than a run's (a lease's end), through the one launcher."""
        with self.sessions.launching:
            return self.launcher.launch(req)

    def board_free_at(self, board: str, now: float) -> float | None:
        """When the board should be free: now if idle, a lease's expiry, a run's timeout; None
        when nobody can say (a person's own lock, quarantine, offline)."""
        with self.lock:
            rec = self.boards.get(board)
            if rec is None:
                return None
            if rec.state == "Idle":
                return now
            lease = self.leases.leases.get(rec.run or "")
            if lease is not None:
                expires = lease.status.get("expiresAt")
                return ts(expires) if expires else None
            run = self.runs.get(rec.run or "")
            if run is None:
                return None
            started = run.status.get("startTime")
            return (ts(started) if started else now) + run.spec.timeoutSeconds

    def active_lease_places(self) -> dict[str, str]:
        """uid -> place of every lease holding a board (the inventory keeps their locks)."""
        with self.lock:
            held = {rec.run: name for name, rec in self.boards.items() if rec.run}
            # a lease being granted has its board before its status names it
            return {lease.uid: lease.status.get("place") or held.get(lease.key, "")
                    for lease in self.index.leases.values()}

    def reindex(self, run: RunState) -> None:
        """After any change to a run (under the lock): its place in what the rounds read."""
        if self.runs.get(run.key) is not run:     # deleted meanwhile
            return
        self.index.update(run, self._queue_entry(run) if run.waiting else None)

    def active_runs(self) -> list[RunState]:
        with self.lock:
            return list(self.index.active.values())

    def _queue_entry(self, r: RunState) -> q.QueueEntry:
        """The run as the scheduler sees it, rebuilt only when what it is made of changes (built
        when the run is observed, so a flood of new runs costs the rounds nothing)."""
        ceiling = self.policy.for_namespace(r.namespace).maxPriority
        avoid = tuple(r.status.get("avoidBoards") or ()) + r.avoid_boards
        suites = r.status.get("resolvedSuites") or []
        fingerprint = (r.generation, ceiling, avoid, len(suites))
        if r.queue_entry is None or r.queue_entry[0] != fingerprint:
            entry = q.QueueEntry(r.key, r.namespace, min(r.spec.priority, ceiling), r.created,
                                self.selector(r.spec), frozenset(avoid),
                                needs_gpu=admission.needs_gpu(suites))
            r.queue_entry = (fingerprint, entry)
        return r.queue_entry[1]

    def _expire(self, waiting: list[RunState], now: float) -> None:
        for r in waiting:
            limit = r.spec.queueTimeoutSeconds
            if limit and now - r.created > limit and r.waiting:
                self.finish(r, Phase.failed, RunFailure.queue_timeout,
                            f"no matching board became free within {limit} s")

    def _publish_positions(self, order: list[q.QueueEntry]) -> None:
        self.last_positions_at = time.monotonic()
        new: dict[str, int | None] = {**q.queue_positions(order, QUEUE_POSITION_LIMIT)}
        for key in set(self.positions) | set(new):
            if self.positions.get(key) != new.get(key) and key in self.runs:
                run = self.runs[key]
                if run.phase == Phase.pending and not run.starting and \
                        run.position_writes < QUEUE_POSITION_WRITES:
                    run.position_writes += 1
                    self.writer.submit(self._write_position, run, new.get(key))
        self.positions = new

    def _write_position(self, run: RunState, position: int | None) -> None:
        """On the writer thread; not once the run has left the queue meanwhile."""
        if run.phase != Phase.pending or run.starting:
            return
        try:
            self.kube.patch_run_status(run.namespace, run.name,
                                       transitions.queue_position(position))
        except API_FAILURES as exc:  # a position is advice; the next one comes with the queue
            log.warning("%s: could not write its queue position: %s", run.key, exc)

    def _ttl(self, runs: list[RunState], now: float) -> None:
        for r in runs:
            ttl = r.spec.ttlSecondsAfterFinished
            done = r.status.get("completionTime")
            if ttl is None or not done or r.phase not in FINISHED:
                continue
            if r.completed_at is None or r.completed_at[0] != done:
                r.completed_at = (done, ts(done))     # parsed once, not every round
            if now - r.completed_at[1] >= ttl:
                self.kube.delete_run(r.namespace, r.name)

    # -- run transitions ----------------------------------------------------------------------
    def patch(self, run: RunState, status: dict[str, Any]) -> None:
        """Checkpoint in the API first; only then may the scheduler act on the new state."""
        written = self.kube.patch_run_status(run.namespace, run.name, status)
        if not written:
            raise RunError("run deleted", reason="Deleted")
        with self.lock:
            run.wrote(written, status)
            self.reindex(run)

    def finish(self, run: RunState, phase: Phase, reason: str, message: str) -> None:
        metrics.FINISHED.labels(phase, reason).inc()
        try:
            self.patch(run, transitions.finished(run.status, run.generation, phase, reason,
                                                 message))
        except RunError:
            return
        self.kube.event(run.ref(), "Normal" if phase == Phase.succeeded else "Warning", reason,
                        message)

    def requeue(self, run: RunState, message: str, avoid: str | None,
                busy_requeues: int | None = None) -> None:
        avoid_list = list(run.status.get("avoidBoards") or [])
        if avoid and avoid not in avoid_list:
            avoid_list.append(avoid)
        try:
            self.patch(run, transitions.requeued(run.status, run.generation, message, avoid_list,
                                                 busy_requeues))
        except RunError:
            return
        self.kube.event(run.ref(), "Normal", Underway.requeued, message)

    def retry_elsewhere(self, run: RunState, board: str, reason: str, message: str,
                        quarantined: bool, party: str = "board") -> None:
        """After a fault on `board` (whose: `party`), try another board or fail the run."""
        attempts = attempt_of(run.status, 1)
        avoid = set(run.status.get("avoidBoards") or []) | {board}
        others = [b for b in self.inventory.views() if b.name not in avoid]
        elsewhere = q.could_ever_match(self.selector(run.spec), others)
        if attempts <= self.policy.maxInfraRetries and elsewhere:
            extra = f"; board {board} quarantined" if quarantined else ""
            self.requeue(run, f"{party} fault on {board} ({reason}: {message}){extra}; "
                              f"retrying on another board", avoid=board)
        else:
            why = "" if elsewhere else "; no other matching board to retry on"
            self.finish(run, Phase.failed, reason, f"{party} fault on {board}: {message} "
                                             f"(after {attempts} attempt(s){why})")

    # -- cancel and delete --------------------------------------------------------------------
    def cancel(self, key: str, *, deleting: bool = False) -> None:
        """Cancel a queued run here; a running one is stopped by its own runner, which watches
        its run. On delete, wait for the runner to let go of the board."""
        with self.lock:
            run = self.runs.get(key)
            if run is not None and deleting:
                run.deleting = True
                self.reindex(run)
        if run is None:
            return
        if run.phase in (Phase.pending, None) and not deleting:
            status = transitions.cancelled_before_start(run.status, run.generation)
            try:
                written = self.kube.guarded_status_write(run.namespace, run.name,
                                                         {"phase": Phase.pending}, status)
                if written:
                    with self.lock:
                        run.wrote(written, status)
                        self.reindex(run)
                    self.kube.event(run.ref(), "Normal", Reason.cancelled,
                                    "cancelled before it started")
            except PreconditionFailed:
                log.info("%s started meanwhile; its session will see the cancel", key)
        elif run.phase == Phase.running and deleting:
            self.sessions.wait_gone(run)
            self.inventory.free(run.status.get("board"), key)
