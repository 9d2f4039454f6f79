"""The board inventory: labgrid places mirrored as Board objects, quarantine and health checks.

A quarantined board's health check is a session like a run's (`session.health`): launched through
the operator's launcher (a process or a Job) with a number of its own per board, so its labgrid
identity and its Lease are its own; it reports its verdict in the Board's `status.healthCheckEnd`.
The operator never opens a board's console: it launches the check, watches its Lease, and acts
on the verdict (back in service, or quarantined until the next check after the cooldown). A check
whose session dies is given up like a failed one; the place it held is released here.

Places come from the coordinator (who holds what, tags, resources); Board objects carry what
benchfarm adds (maintenance, consecutive board faults, quarantine). Only board faults reach
`board_failed`: outages and busy boards never count. A place still held by the session of a run
that is no longer running on it (its runner died) is released here, so no board is lost.

Board status is written to the API by a thread of its own, the latest state per board, so the
scheduler never waits on those writes (at a thousand boards turning over, a refresh wrote a few a
second, each 50-200 ms under load, before the round could give a freed board to the next run).

What the inventory needs of the operator is `InventoryRuntime` (the registry's lock, the API, the
coordinator, the device types, the policy, the launcher, its namespace, the active runs, a
wake-up; it sets `inventory_known`):
it imports neither the runtime nor the session supervisor.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from ..api.models import HELD_PREFIX, DirectLocks
from ..api.notifications import EventKind
from ..api.outcomes import HealthCheck, HealthCheckEnd, HealthVerdict
from ..core import notify, queue as q
from ..core.conditions import now_iso, set_condition
from ..errors import InfraError
from ..kubeapi.client import API_FAILURES
from ..kubeapi.leases import HEALTH_LEASE_LABEL, LeaseObserver, health_lease_name, list_leases
from ..lab.coordinator import (
    SESSION_HOST,
    health_check_of,
    health_identity,
    is_netcheck,
    lease_uid_of,
)
from . import metrics
from .ports import LAUNCH_FAILURES, Launch, Launcher
from .state import BoardRecord, Boards, Registry, RunState, ts, written
from .workers import Workers

if TYPE_CHECKING:
    from ..api.devicetype import DeviceType

log = logging.getLogger("benchfarm")
REFRESH_EVERY = 3.0
WALK_ALL_EVERY = 60.0           # seconds between two refreshes that look at every place again
WATCH_EVERY = 2.0               # seconds between two looks at the health checks' Leases
HEALTH_STARTUP_GRACE = 45.0     # seconds a launched health check has to take its Lease
KINDS_KEPT = 1024               # selectors whose matching device types are kept (`kinds_matching`)


def run_uid_of(holder: str | None) -> str | None:
    """The run uid behind a labgrid holder identity of one of our sessions, if it is one."""
    prefix = f"{SESSION_HOST}/run-"
    return holder[len(prefix):] if holder and holder.startswith(prefix) else None


def _iso(t: float | None) -> str:
    return datetime.fromtimestamp(t or time.time(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class InventoryRuntime(Registry, Protocol):
    """What the inventory needs of the operator's registry (`kube.runtime.Runtime` is one)."""

    inventory_known: bool       # set once the coordinator's places have been read
    namespace: str              # the operator's: health checks' Leases live there

    @property
    def device_types(self) -> Mapping[str, DeviceType]: ...

    @property
    def launcher(self) -> Launcher: ...

    def active_runs(self) -> list[RunState]: ...

    def active_lease_places(self) -> dict[str, str]: ...

    def wake(self) -> None: ...


class Inventory:
    def __init__(self, rt: InventoryRuntime) -> None:
        self.rt = rt
        self.boards = Boards()
        self.index = q.BoardIndex()    # the available boards as the rounds see them (`board_index`)
        self.last_refresh = 0.0
        self.checking: dict[str, float] = {}   # board -> when its health check was launched
        self.observer = LeaseObserver(grace=5.0)        # the health checks' Leases
        self.last_watch = 0.0
        self.clock = time.monotonic
        self.orphans: dict[str, str | None] = {}          # place -> holder seen orphaned last refresh
        self.publisher = Workers(max_workers=1, thread_name_prefix="board-status")
        self.unpublished: dict[str, dict[str, Any]] = {}      # board -> the status to write next
        self.views_of: dict[str, q.BoardView] = {}   # the last view of each board (see `view`)
        self.shape = 0       # counts the boards' arrivals and changes of device type or labels
        self.kinds: dict[q.Selector, frozenset[str]] = {}   # see `kinds_matching`, as of:
        self.kinds_shape = 0
        self.walked_all = 0.0          # when a refresh last walked every place
        self.reported: bool | None = None     # directLocks: Report, as of that walk

    def close(self) -> None:
        """The last statuses are written before the operator exits."""
        self.publisher.shutdown(wait=True)

    def load(self) -> None:
        for board in self.rt.kube.list_cluster("boards"):
            st = board.get("status") or {}
            rec = self.boards.setdefault(board["metadata"]["name"],
                                         BoardRecord(board["metadata"]["name"]))
            rec.uid = board["metadata"].get("uid", "")
            rec.failures = int(st.get("consecutiveInfraFailures") or 0)
            rec.maintenance = bool((board.get("spec") or {}).get("maintenance"))
            started = written(HealthCheck, st, "healthCheck")
            rec.health_check = started.check if started else 0
            if st.get("state") == "Quarantined":
                rec.quarantined_since = ts(st.get("quarantinedAt"))
                rec.reason = st.get("reason")
                end = written(HealthCheckEnd, st, "healthCheckEnd")
                if started and (end is None or end.check < started.check or
                                end.verdict == HealthVerdict.passed) and \
                        ts(started.startedAt or None) >= rec.quarantined_since:
                    # its latest check, started in this quarantine, runs (its Lease tells) or
                    # passed before the operator could act on it: adopted
                    rec.run = f"(health check {started.check})"
                    self.checking[rec.name] = self.clock()
                    self.observe_health(rec.name, st)

    def views(self) -> list[q.BoardView]:
        with self.rt.lock:
            return [self.view(b) for b in self.boards.values() if b.device_type]

    def kinds_matching(self, selector: q.Selector) -> frozenset[str]:
        """The device types of the boards `selector` matches, busy or not (none: no board ever
        will). Admission asks this of every run: viewing 1,000 boards under the lock for each run
        of a flood held up the rounds, while most runs of a flood share a few selectors (a pool,
        a rack) and a run that names its board needs only that one. The answer is kept until a
        board comes or changes its type or labels; at most `KINDS_KEPT` of them (a tenant's
        made-up selectors cannot grow the operator)."""
        with self.rt.lock:
            if self.kinds_shape != self.shape or len(self.kinds) >= KINDS_KEPT:
                self.kinds.clear()
                self.kinds_shape = self.shape
            kinds = self.kinds.get(selector)
            if kinds is None:
                boards: Iterable[BoardRecord | None] = self.boards.values() \
                    if selector.board is None else (self.boards.get(selector.board),)
                kinds = self.kinds[selector] = frozenset(
                    b.device_type for b in boards
                    if b is not None and b.device_type and q.matches(selector, self.view(b)))
            return kinds

    def board_index(self) -> q.BoardIndex:
        """Under the lock: the available boards, indexed, as of now (the boards whose view
        changed since the last call are viewed again; a round no longer views all 1,000)."""
        for name in self.boards.changed:
            rec = self.boards[name]
            if rec.device_type:
                self.index.put(self.view(rec))
            else:
                self.index.remove(name)
        self.boards.changed.clear()
        return self.index

    def view(self, b: BoardRecord) -> q.BoardView:
        """What the scheduler sees of a board; the last one again while nothing it shows changed
        (the index's `put` then sees an equal view and leaves its lists alone)."""
        available = b.state == "Idle"
        v = self.views_of.get(b.name)
        if v is None or v.available != available or v.device_type != b.device_type or \
                v.labels != b.labels:
            dt = self.rt.device_types.get(b.device_type)
            v = self.views_of[b.name] = q.BoardView(b.name, b.device_type, dict(b.labels),
                                                    available=available, gpu=bool(dt and dt.gpu))
        return v

    # -- who holds a board --------------------------------------------------------------------
    def claim(self, board: str, key: str) -> None:
        with self.rt.lock:
            rec = self.boards.setdefault(board, BoardRecord(board))
            rec.run = key

    def free(self, board: str | None, key: str) -> None:
        if not board:
            return
        with self.rt.lock:
            rec = self.boards.get(board)
            if rec is None or rec.run != key:
                return
            rec.run = None
        log.info("%s: free again (%s let go of it)", board, key)
        self.rt.wake()
        self.sync(board)

    def held(self, board: str, by: str) -> None:
        with self.rt.lock:
            if board in self.boards:
                self.boards[board].held_by_other = by

    # -- refresh from the coordinator ---------------------------------------------------------
    def refresh(self, force: bool = False) -> None:
        if not force and time.monotonic() - self.last_refresh < REFRESH_EVERY:
            return
        self.last_refresh = time.monotonic()
        rt = self.rt
        try:
            t0 = time.perf_counter()
            places, changed = rt.coordinator.changes()
            metrics.PLACES.set(time.perf_counter() - t0)
        except InfraError as exc:
            log.warning("labgrid coordinator unavailable: %s", exc)
            return
        running_uids = {r.uid: r for r in rt.active_runs()}
        leased = rt.active_lease_places()
        report = rt.policy.directLocks == DirectLocks.report
        now = time.monotonic()
        if force or report != self.reported or now - self.walked_all >= WALK_ALL_EVERY:
            names: Iterable[str] = places     # every place (and a policy change shows on all)
            self.reported, self.walked_all = report, now
        else:
            # what changed, and every place someone holds (its holder's run may have ended
            # meanwhile: an orphan); a free place that did not change is as it was
            names = changed | {n for n, p in places.items() if not p.free}
        direct: list[tuple[str, str]] = []
        orphans = {}
        for name in names:
            place = places.get(name)
            if place is None:       # deleted: its Board stays, as before
                continue
            uid = None
            if name not in self.boards:
                # a new place's Board, written before taking the lock (only this thread adds
                # records): an API round trip, or an outage waited out, under it held up
                # every round (1,000 new places: holds of 20-75 ms, one after the other)
                body = rt.kube.create_board(name, {"benchfarm.io/device-type":
                                                   place.tags.get("device_type", "unknown")})
                uid = (body.get("metadata") or {}).get("uid", "")
            with rt.lock:
                rec = self.boards.get(name)
                if rec is None:
                    rec = self.boards[name] = BoardRecord(name)
                if uid is not None:
                    rec.uid = uid
                kind = place.tags.get("device_type", "")
                labels = {k: v for k, v in place.tags.items() if k != "device_type"}
                if kind != rec.device_type or labels != rec.labels:
                    self.shape += 1
                rec.device_type, rec.labels = kind, labels
                rec.online = bool(place.resources) and rec.device_type in rt.device_types
                uid = run_uid_of(place.acquired)
                check = health_check_of(place.acquired)
                lease_uid = lease_uid_of(place.acquired)
                rec.holder = place.acquired
                ours = place.acquired == rt.coordinator.identity or uid is not None or \
                    check is not None or lease_uid is not None
                rec.held_by_other = None if (place.free or ours) else \
                    (place.acquired or f"reserved {place.reserved_by}")
                # a board-network audit (`benchfarm check --boards`) holds it for a minute:
                # not schedulable meanwhile, but no lock outside benchfarm either
                lock = place.acquired if report and place.acquired and not ours and \
                    not is_netcheck(place.acquired) else None
                if lock != rec.direct_lock:
                    rec.direct_lock = lock
                    rec.conditions = set_condition(
                        rec.conditions, "DirectLock", "True" if lock else "False",
                        "AcquiredOutsideBenchfarm" if lock else "NoDirectLock",
                        f"acquired with labgrid by {lock}, outside any BoardLease; benchfarm "
                        "leaves it alone" if lock else "no lock outside benchfarm")
                    if lock:
                        direct.append((name, lock))
                run = running_uids.get(uid) if uid else None
                if uid and (run is None or run.status.get("board") != name):
                    orphans[name] = place.acquired
                if lease_uid is not None and leased.get(lease_uid) != name:
                    orphans[name] = place.acquired    # a lease that ended while we were away
                if check is not None and (check[0] != name or name not in self.checking or
                                          check[1] != rec.health_check):
                    orphans[name] = place.acquired    # a health check given up, or another's
            self.sync(name)
        for name, holder in orphans.items():   # seen twice in a row: its runner is gone
            if self.orphans.get(name) == holder:
                log.info("releasing %s: held by %s, whose run no longer runs there", name, holder)
                try:
                    rt.coordinator.release(name, holder=holder)
                except InfraError as exc:
                    log.warning("could not release %s: %s", name, exc)
        self.orphans = orphans
        rt.inventory_known = True
        for name, holder in direct:
            rt.kube.event({"apiVersion": "benchfarm.io/v1alpha1", "kind": "Board",
                           "metadata": {"name": name}}, "Warning", "DirectLock",
                          f"{name} was acquired outside benchfarm by {holder} (labgrid-client "
                          "acquire, no BoardLease): it skips the queue; the lab reports it "
                          "(LabPolicy directLocks: Report)")

    def sync(self, name: str) -> None:
        with self.rt.lock:
            rec = self.boards.get(name)
            if rec is None:
                return
            status = {"deviceType": rec.device_type, "labels": rec.labels, "state": rec.state,
                      "run": rec.run or (f"{HELD_PREFIX}{rec.held_by_other}" if rec.held_by_other
                                         else None),
                      "consecutiveInfraFailures": rec.failures, "reason": rec.reason,
                      "quarantinedAt": datetime.fromtimestamp(rec.quarantined_since, UTC)
                      .strftime("%Y-%m-%dT%H:%M:%SZ") if rec.quarantined_since else None,
                      **({"conditions": rec.conditions} if rec.conditions else {})}
            if status == rec.last_status:
                return
            rec.last_status = status
            queued = name in self.unpublished
            self.unpublished[name] = status
        if not queued:
            self.publisher.submit(self._publish, name)

    def _publish(self, name: str) -> None:
        with self.rt.lock:
            status = self.unpublished.pop(name, None)
        if status is None:
            return
        try:
            self.rt.kube.patch_board_status(name, status)
        except API_FAILURES as exc:  # the API's outage: written again at the next refresh
            log.warning("could not write the status of board %s: %s", name, exc)
            with self.rt.lock:
                rec = self.boards.get(name)
                if rec is not None and rec.last_status == status:
                    rec.last_status = None

    # -- faults and quarantine ----------------------------------------------------------------
    def board_ok(self, board: str) -> None:
        with self.rt.lock:
            rec = self.boards.get(board)
            if rec is None or (rec.failures == 0 and rec.reason is None):
                return
            rec.failures = 0
            rec.reason = None
        self.sync(board)

    def board_failed(self, board: str, exc: InfraError) -> bool:
        """A board fault: count it; quarantine after the policy's limit. True if quarantined."""
        rt = self.rt
        with rt.lock:
            rec = self.boards[board]
            rec.failures += 1
            rec.reason = f"{exc.reason}: {exc}"[:500]
            quarantined = rec.failures >= rt.policy.quarantineAfterFailures and \
                rec.quarantined_since is None
            if quarantined:
                rec.quarantined_since = time.time()
        self.sync(board)
        if quarantined:
            message = f"{board} quarantined after {rec.failures} board faults: {rec.reason}"
            rt.kube.event({"apiVersion": "benchfarm.io/v1alpha1", "kind": "Board",
                           "metadata": {"name": board}}, "Warning", "Quarantined", message)
            rt.notify(notify.board_event(EventKind.board_quarantined, board,
                                         _iso(rec.quarantined_since), message))
        return quarantined

    # -- health checks: sessions of their own ------------------------------------------------
    def health_checks(self) -> None:
        """Launch the check of every quarantined board whose cooldown is over, and give up those
        whose session died (called by every scheduling round, on the scheduler's thread)."""
        self._watch_checks()
        now = time.time()
        rt = self.rt
        with rt.lock:
            due = [b.name for b in self.boards.values()
                   if b.quarantined_since is not None and not b.run and not b.held_by_other
                   and b.online and b.name not in self.checking
                   and now - b.quarantined_since >= rt.policy.quarantineCooldownSeconds]
        for name in due:
            self._launch_check(name)

    def _launch_check(self, name: str) -> None:
        """Check number n+1: recorded on the Board first (a restarted operator adopts it), then
        launched like any session; its session reports in `status.healthCheckEnd`."""
        rt = self.rt
        with rt.lock:
            rec = self.boards[name]
            # numbered before anything is written: from here only this check's verdict counts
            # (a Board event still carrying the previous check's is not this one's)
            check = rec.health_check = rec.health_check + 1
            dt = rt.device_types[rec.device_type]
            rec.run = f"(health check {check})"
            self.checking[name] = self.clock()
        try:
            rt.kube.patch_board_status(name, {"healthCheck": HealthCheck(
                check=check, startedAt=now_iso()).model_dump(mode="json")})
        except API_FAILURES as exc:  # the API's outage: the next check (a number of its own) is
            #                        tried after the cooldown
            log.warning("could not start the health check of %s: %s", name, exc)
            with rt.lock:
                rec.run, rec.quarantined_since = None, time.time()
                self.checking.pop(name, None)
            self.sync(name)
            return
        self.sync(name)
        req = Launch.health_check(name, rec.uid, check, rt.namespace, dt.health_check_seconds)
        try:
            handle = rt.launcher.launch(req)
        except LAUNCH_FAILURES as exc:   # no Lease will show: given up after the grace period
            log.error("%s: the launcher could not start it: %s", req.what(), exc)
            handle = f"not started ({exc})"
        log.info("%s: %s", req.what(), handle)

    def observe_health(self, name: str, status: dict[str, Any]) -> None:
        """A Board's status as the API has it: the verdict of its latest check, if it came."""
        end = written(HealthCheckEnd, status, "healthCheckEnd")
        with self.rt.lock:
            rec = self.boards.get(name)
            if end is None or rec is None or name not in self.checking or \
                    end.check != rec.health_check:
                return
        self._settle(name, end)

    def _watch_checks(self) -> None:
        """A check whose session holds no live Lease (after a grace period to take it) is dead:
        its verdict is read once more, else the place it may hold is released and the board
        stays quarantined, checked again after the cooldown."""
        rt = self.rt
        if not self.checking or self.clock() - self.last_watch < WATCH_EVERY:
            return
        self.last_watch = now = self.clock()
        try:
            self.observer.observe(list_leases(rt.kube, f"{HEALTH_LEASE_LABEL}=true"), now=now)
        except API_FAILURES as exc:  # our own view of the API is gone: judge nobody dead
            log.warning("cannot list health checks' Leases (%s); not judging them", exc)
            self.observer.forget()
            return
        with rt.lock:
            dead = [(name, self.boards[name].health_check) for name, since in
                    self.checking.items()
                    if now - since >= HEALTH_STARTUP_GRACE and not self.observer.alive(
                        f"{rt.namespace}/{health_lease_name(name)}", now)]
        for name, check in dead:
            try:
                body = rt.kube.get_cluster("boards", name) or {}
            except API_FAILURES as exc:
                log.warning("cannot read board %s (%s); judging its check later", name, exc)
                continue
            end = written(HealthCheckEnd, body.get("status") or {}, "healthCheckEnd")
            if end is not None and end.check == check:
                self._settle(name, end)
                continue
            host, user = health_identity(name, check)
            try:
                if rt.coordinator.release(name, holder=f"{host}/{user}"):
                    log.info("released %s, left acquired by its health check %d", name, check)
            except InfraError as exc:   # seen as an orphan by a later refresh
                log.warning("could not release %s after its health check: %s", name, exc)
            self._settle(name, HealthCheckEnd(
                check=check, verdict=HealthVerdict.failed, reason="HealthCheckLost",
                message="its session died (its Lease stood still, or was never taken)"))

    def _settle(self, name: str, end: HealthCheckEnd) -> None:
        """Back to service, or quarantined again until the next check after the cooldown."""
        rt = self.rt
        ok = end.verdict == HealthVerdict.passed
        with rt.lock:
            rec = self.boards[name]
            if self.checking.pop(name, None) is None:   # settled already
                return
            rec.run = None
            if ok:
                rec.quarantined_since, rec.failures, rec.reason = None, 0, None
            else:
                rec.quarantined_since = time.time()
                rec.reason = f"health check failed: {end.reason}: {end.message}"[:500]
        log.info("health check %d of %s: %s %s", end.check, name, end.verdict, end.message)
        self.sync(name)
        message = (f"{name} {'booted to its prompt; back in service' if ok else 'still fails'}"
                   f" (health check {end.check}: {end.reason or end.message})"[:1000])
        rt.kube.event({"apiVersion": "benchfarm.io/v1alpha1", "kind": "Board",
                       "metadata": {"name": name}}, "Normal" if ok else "Warning",
                      "HealthCheckPassed" if ok else "HealthCheckFailed", message)
        if ok:
            rt.notify(notify.board_event(EventKind.board_back, name, _iso(time.time()), message))
        rt.wake()

