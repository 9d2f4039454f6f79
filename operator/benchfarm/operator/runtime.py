"""The operator's registry, between kopf's handlers and the lab, and the parts built around it.

kopf's handlers post every BenchmarkRun, Board and LabPolicy they see to the owner thread
(`operator.state.owner`), which feeds it into this registry (`observe_*`) and is the only thread that
changes it; between its messages it runs the scheduling iteration (`operator.runs.scheduler`), which asks
`core.scheduling.rounds` what each round decides and hands launches to the session supervisor, which writes
them to the run's status and launches a runner. Threads waiting for the API server hand their
answers back to the owner.
The operator never touches a board: sessions run in their own processes (`operator.launch.launchers`),
prove they are alive with Leases and are adopted, not restarted, when the operator itself
restarts. A run's transitions are written by `operator.runs.writes`, its session seat kept by
`operator.runs.seating`.

The runtime builds the inventory, the session supervisor, the lease keeper, the seats, the
transitions and the scheduler and hands each itself, typed by the one Protocol its room declares
(what every room reads, `state.records.Registry`, and per room `boards.health.BoardsRuntime`,
`leases.book.LeaseRuntime`, `runs.writes.RunsRuntime`, which the scheduler's `SchedulerRuntime`
extends): no room imports the runtime, and mypy checks here that the runtime is each of them.
The import contracts in pyproject.toml keep the operator's rooms in layers, without cycles.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import Any

from pydantic import ValidationError

from benchfarm.api.campaigns import AVOID_ANNOTATION
from benchfarm.api.devicetype import DeviceType
from benchfarm.api.labpolicy import LabPolicySpec
from benchfarm.api.notifications import Event
from benchfarm.api.outcomes import FINISHED, Condition, Phase, Reason
from benchfarm.api.runs import BenchmarkRunSpec, BenchmarkRunStatus
from benchfarm.core.conditions import get_condition
from benchfarm.core.policy import trust
from benchfarm.core.scheduling.fairness import RoundRobinFairness
from benchfarm.errors import Party
from benchfarm.history.db import Database
from benchfarm.history.outbox import Outbox
from benchfarm.kubeapi import versions
from benchfarm.kubeapi.client import Kube
from benchfarm.lab.coordinator import Coordinator
from benchfarm.lab.devicetypes import load_device_types
from benchfarm.notify.mail import SmtpSettings
from benchfarm.operator.boards.inventory import Inventory
from benchfarm.operator.launch import launchers
from benchfarm.operator.launch.interface import Launch
from benchfarm.operator.leases.keeper import Leases
from benchfarm.operator.notifications.notifier import Notifier, notify_settings_from
from benchfarm.operator.runs import admission
from benchfarm.operator.runs.fairness import FairnessBook
from benchfarm.operator.runs.scheduler import POLICY_NAME, Scheduler
from benchfarm.operator.runs.seating import Seats
from benchfarm.operator.runs.sessions import Supervisor
from benchfarm.operator.runs.writes import RunWrites
from benchfarm.operator.state import metrics
from benchfarm.operator.state.collector import HeapTender
from benchfarm.operator.state.owner import Owner
from benchfarm.operator.state.pools import Workers
from benchfarm.operator.state.records import Owned, RunIndex, RunState, ts
from benchfarm.operator.stores.accounts import StoreAccounts, from_settings as store_accounts_from
from benchfarm.operator.stores.indexer import Indexer
from benchfarm.operator.stores.reachability import Reachability
from benchfarm.settings import Settings
from benchfarm.store.artifacts import ArtifactStore, StoreConfig
from benchfarm.store.software import internal_from

log = logging.getLogger("benchfarm")

LAUNCH_THREADS = 4           # launches in flight at once (each mostly waits for the API server)
# seconds a thread may keep the GIL once another asks for it (Python's default: 0.005): a round
# that waits for the GIL waits up to that long for each thread handed it first; still paying with
# the owner thread (benchmarks/RESULTS.md, "The tunings measured with the owner thread")
GIL_SWITCH = 0.001


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
        self.store_accounts: StoreAccounts | None = None   # each namespace's store credential
        self.signing_key = signing_key    # signs what sessions execute (core.policy.trust)
        self.internal = internal          # the lab's internal ranges: no software from there
        self.coordinator = coordinator
        self.store = store
        self.device_types = device_types
        self.launcher = launcher
        # the lab's state has one writer, the owner thread: kopf's handlers post to it, the
        # threads that wait for the API server hand it their answers (`operator.state.owner`)
        self.owner = Owner()
        self.runs: Owned[str, RunState] = Owned("run")
        self.index = RunIndex()        # what a round reads; kept current by `reindex`
        self.policy = LabPolicySpec()
        self.fairness = RoundRobinFairness()
        self.inventory_known = False
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
        self.writes = RunWrites(self)     # a run's transitions, checkpointed in the API first
        self.seats = Seats(self)          # session seats: relays, go-aheads
        self.scheduler = Scheduler(self, settings.scheduler_rtprio)
        self.launches = Workers(max_workers=LAUNCH_THREADS, thread_name_prefix="launch")
        # what a round decided but no run waits for (fairness, queue positions), written here:
        # the next round never waits for an API round trip
        self.writer = Workers(max_workers=1, thread_name_prefix="round-writes")
        self.fairness_book = FairnessBook(kube, settings.namespace, self.fairness, self.owner,
                                          self.writer)
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
        coordinator = Coordinator.from_settings(settings, user=settings.labgrid_user,
                                                host=settings.labgrid_host)
        store = ArtifactStore(StoreConfig.from_settings(settings))
        try:
            key = trust.key_from(settings.signing_key)
        except ValueError as exc:
            raise SystemExit(str(exc)) from exc
        try:
            notify_settings = notify_settings_from(settings)
        except ValueError as exc:
            raise SystemExit(str(exc)) from exc
        kube = Kube(settings)
        url = settings.database_url
        db = Database(url) if url else None
        indexer = Indexer(db, store, kube) if db is not None else None
        rt = cls(settings, kube, coordinator, store, device_types,
                 launchers.from_settings(settings, kube), signing_key=key,
                 internal=internal_from(settings), indexer=indexer)
        # its own API client, with a short outage budget: it waits an outage out itself
        rt.notifier = Notifier(Outbox(db) if db is not None else None,
                               Kube(settings, outage_budget=10.0),
                               notify_settings, SmtpSettings.from_settings(settings),
                               rt.namespace, lambda: rt.policy, store)
        rt.store_accounts = store_accounts_from(settings, store.config)
        return rt

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        sys.setswitchinterval(GIL_SWITCH)
        self.scheduler.start()
        if self.indexer is not None:
            self.indexer.start()
        self.reachability.start()
        if self.notifier is not None:
            self.notifier.start()
        if self.store_accounts is not None:
            self.store_accounts.start()
        t0 = time.monotonic()
        await asyncio.to_thread(self.owner.call, self.scheduler.recover)
        metrics.RECOVERY.set(time.monotonic() - t0)
        metrics.watch_collections()
        self.wake()

    async def stop(self) -> None:
        self.scheduler.stopping = True
        # the launches and writes on their way end first: they hand their answers to the owner
        await asyncio.to_thread(self.launches.shutdown, True)
        await asyncio.to_thread(self.writer.shutdown, True)
        await asyncio.to_thread(self.owner.stop)
        await asyncio.to_thread(self.inventory.statuses.close)
        await asyncio.to_thread(self.coordinator.close)
        await asyncio.to_thread(self.reachability.stop)
        if self.notifier is not None:
            await asyncio.to_thread(self.notifier.stop)
        if self.store_accounts is not None:
            await asyncio.to_thread(self.store_accounts.stop)
        if self.indexer is not None:
            await asyncio.to_thread(self.indexer.stop)

    def wake(self) -> None:
        self.scheduler.wake()

    # -- registry (fed by kopf) ---------------------------------------------------------------
    def observe_run(self, event_type: str | None, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if event_type == "DELETED":
            run = self.runs.pop(key, None)
            self.index.forget(key)
            if run is not None:
                self.inventory.free(run.board, key)
            return
        try:
            spec = BenchmarkRunSpec(**(body.get("spec") or {}))
        except ValidationError:  # invalid bodies are rejected by admission; ignore them here
            return
        status = dict(body.get("status") or {})
        seen = BenchmarkRunStatus.of(status)     # parsed once for the event
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
            if not (current.starting and seen.phase == Phase.pending):
                current.take(status, seen)
            run = current
        else:
            run = self.runs[key] = RunState(meta["namespace"], meta["name"], meta["uid"],
                                            meta.get("generation", 1),
                                            ts(meta.get("creationTimestamp")), spec, status,
                                            deleting=bool(meta.get("deletionTimestamp")),
                                            avoid_boards=avoid_annotation(meta),
                                            version=versions.of(body))
            run.take(status, seen)
        board = seen.board
        if board:
            if run.phase == Phase.running and not seen.boardReleased:
                self.inventory.claim(board, key)          # adopted after a restart, too
            else:
                self.inventory.free(board, key)
                cond = get_condition(seen.conditions, Condition.succeeded) or {}
                if run.phase == Phase.succeeded or cond.get("reason") in _BOARD_IS_FINE:
                    self.inventory.health.board_ok(board)
        self.reindex(run)
        if self.indexer is not None and run.phase in FINISHED:
            self.indexer.finished(run.namespace, run.name, run.uid, status)
        if self.notifier is not None and run.phase in FINISHED:
            self.notifier.run_seen(body)
        if self.store_accounts is not None:   # it reads its results back with its own
            self.store_accounts.want([run.namespace])
        self.wake()

    def observe_board(self, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        rec = self.inventory.boards.get(name)
        drained = rec is not None and rec.maintenance != bool(
            (body.get("spec") or {}).get("maintenance"))
        if rec is not None:
            rec.maintenance = bool((body.get("spec") or {}).get("maintenance"))
            rec.uid = body["metadata"].get("uid", rec.uid)
        if drained:   # its state (Maintenance, or back) now: a refresh walks a free place that
            self.inventory.statuses.sync(name)   # did not change at the coordinator only every minute
        self.inventory.health.observe_health(name, dict(body.get("status") or {}))
        self.wake()

    def observe_policy(self, body: dict[str, Any], deleted: bool = False) -> None:
        """The LabPolicy `default` changed (or went: the built-in defaults apply). Any other
        LabPolicy is ignored, with a warning: sessions read only `default` too."""
        name = body["metadata"]["name"]
        if name != POLICY_NAME:
            log.warning("LabPolicy %r is ignored: the lab reads only the one named %r", name,
                        POLICY_NAME)
            if not deleted:
                self.writer.submit(self.kube.event, body, "Warning", "PolicyIgnored",
                                   f"only the LabPolicy named {POLICY_NAME!r} is in force")
            return
        policy = LabPolicySpec() if deleted else LabPolicySpec(**body.get("spec") or {})
        changed, self.policy = policy != self.policy, policy
        if self.store_accounts is not None:   # a team the lab lets in uploads before its runs
            self.store_accounts.policy(policy)
        if changed and self.notifier is not None:   # webhookHosts: Ready again
            self.notifier.policy_changed()
        if changed:   # priority ceilings: every waiting entry's place in the queue may move
            for key in list(self.index.queue.keys()):
                if key in self.runs:
                    self.reindex(self.runs[key])
                else:
                    self.leases.reindex(self.leases.leases[key])
        self.wake()

    def notify(self, event: Event) -> None:
        """Something a Notification may subscribe to happened (never waits: `operator.notifications.notifier`)."""
        if self.notifier is not None:
            self.notifier.emit(event)

    # -- what the parts ask of the registry ---------------------------------------------------

    def launch_session(self, req: Launch) -> str:
        """A session other than a run's (a lease's end), through the one launcher."""
        with self.sessions.launching:
            return self.launcher.launch(req)

    def board_free_at(self, board: str, now: float) -> float | None:
        """When the board should be free: now if idle, a lease's expiry, a run's timeout; None
        when nobody can say (a person's own lock, quarantine, offline). On the owner's thread."""
        rec = self.boards.get(board)
        if rec is None:
            return None
        if rec.state == "Idle":
            return now
        lease = self.leases.leases.get(rec.run or "")
        if lease is not None:
            expires = lease.typed.expiresAt
            return ts(expires) if expires else None
        run = self.runs.get(rec.run or "")
        if run is None:
            return None
        started = run.head.startTime
        return (ts(started) if started else now) + run.spec.timeoutSeconds

    def active_lease_places(self) -> dict[str, str]:
        """uid -> place of every lease holding a board (the inventory keeps their locks). On
        the owner's thread."""
        held = {rec.run: name for name, rec in self.boards.items() if rec.run}
        # a lease being granted has its board before its status names it
        return {lease.uid: lease.typed.place or held.get(lease.key, "")
                for lease in self.index.leases.values()}

    def reindex(self, run: RunState) -> None:
        """After any change to a run (on the owner's thread): its place in what the rounds
        read."""
        if self.runs.get(run.key) is not run:     # deleted meanwhile
            return
        entry = admission.queue_entry(
            run, self.policy.for_namespace(run.namespace).maxPriority) if run.waiting else None
        self.index.update(run, entry)

    def active_runs(self) -> list[RunState]:
        """The runs holding a board or being started, from any thread."""
        return self.owner.call(lambda: list(self.index.active.values()))
