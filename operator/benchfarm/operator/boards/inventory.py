"""The board inventory: labgrid places mirrored as Board objects, who holds each, and what the
scheduler sees of them.

Places come from the coordinator (who holds what, tags, resources); Board objects carry what
benchfarm adds (maintenance, consecutive board faults, quarantine). A place still held by the
session of a run that is no longer running on it (its runner died) is released here, so no board
is lost.

The inventory owns the board records; two jobs on them are modules of their own, to which it
hands the records: a board's faults, quarantine and health checks (`operator.boards.health`:
`board_ok`, `board_failed`, `health_checks`, `observe_health`), and the writing of Board
statuses by a thread of their own (`operator.boards.statuses`: `sync`). The rest of the operator calls
them here, on the inventory.

What the inventory needs of the operator is the room's `operator.boards.health.BoardsRuntime`
(the registry's owner, the API, the coordinator, the device types, the policy, the launcher, its
namespace, the active runs, a wake-up; it sets `inventory_known`): it imports neither the
runtime nor the session supervisor.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from benchfarm.api.boards import DirectLocks
from benchfarm.api.places import SESSION_HOST, health_check_of, is_netcheck, lease_uid_of
from benchfarm.core.conditions import set_condition
from benchfarm.core.scheduling import queue as q
from benchfarm.core.scheduling.boardindex import BoardIndex, BoardView, matches
from benchfarm.errors import InfraError
from benchfarm.operator.boards.health import (
    HEALTH_STARTUP_GRACE as HEALTH_STARTUP_GRACE,
    BoardsRuntime,
    HealthChecks,
)
from benchfarm.operator.boards.places import PlaceReader
from benchfarm.operator.boards.statuses import BoardStatuses
from benchfarm.operator.state.records import BoardRecord, Boards

log = logging.getLogger("benchfarm")
REFRESH_EVERY = 3.0
WALK_ALL_EVERY = 60.0           # seconds between two refreshes that look at every place again
KINDS_KEPT = 1024               # selectors whose matching device types are kept (`kinds_matching`)


def run_uid_of(holder: str | None) -> str | None:
    """The run uid behind a labgrid holder identity of one of our sessions, if it is one."""
    prefix = f"{SESSION_HOST}/run-"
    return holder[len(prefix):] if holder and holder.startswith(prefix) else None


class Inventory:
    def __init__(self, rt: BoardsRuntime) -> None:
        self.rt = rt
        self.boards = Boards()
        self.index = BoardIndex()    # the available boards as the rounds see them (`board_index`)
        self.last_refresh = 0.0        # monotonic: when the read last applied began
        self.read_at = 0.0             # monotonic: when the last read was started
        self.reader = PlaceReader(rt)
        self.statuses = BoardStatuses(rt, self.boards)
        self.health = HealthChecks(rt, self.boards, self.statuses.sync)
        self.checking = self.health.checking   # theirs: board -> when its check was launched
        self.orphans: dict[str, str | None] = {}          # place -> holder seen orphaned last refresh
        self.views_of: dict[str, BoardView] = {}   # the last view of each board (see `view`)
        self.shape = 0       # counts the boards' arrivals and changes of device type or labels
        self.kinds: dict[q.Selector, frozenset[str]] = {}   # see `kinds_matching`, as of:
        self.kinds_shape = 0
        self.walked_all = 0.0          # when a refresh last walked every place
        self.reported: bool | None = None     # directLocks: Report, as of that walk

    def load(self) -> None:
        for board in self.rt.kube.list_cluster("boards"):
            st = board.get("status") or {}
            rec = self.boards.setdefault(board["metadata"]["name"],
                                         BoardRecord(board["metadata"]["name"]))
            rec.uid = board["metadata"].get("uid", "")
            rec.failures = int(st.get("consecutiveInfraFailures") or 0)
            rec.maintenance = bool((board.get("spec") or {}).get("maintenance"))
            self.health.load(rec, st)       # its last check, its quarantine; a running check adopted

    def views(self) -> list[BoardView]:
        """Every board as the scheduler sees it, from any thread."""
        return self.rt.owner.call(
            lambda: [self.view(b) for b in self.boards.values() if b.device_type])

    def kinds_matching(self, selector: q.Selector) -> frozenset[str]:
        """The device types of the boards `selector` matches, busy or not (none: no board ever
        will). Admission asks this of every run: viewing 1,000 boards on the owner for each run
        of a flood held up the rounds, while most runs of a flood share a few selectors (a pool,
        a rack) and a run that names its board needs only that one. The answer is kept until a
        board comes or changes its type or labels; at most `KINDS_KEPT` of them (a tenant's
        made-up selectors cannot grow the operator). From any thread."""
        return self.rt.owner.call(self._kinds_matching, selector)

    def _kinds_matching(self, selector: q.Selector) -> frozenset[str]:
        if self.kinds_shape != self.shape or len(self.kinds) >= KINDS_KEPT:
            self.kinds.clear()
            self.kinds_shape = self.shape
        kinds = self.kinds.get(selector)
        if kinds is None:
            boards: Iterable[BoardRecord | None] = self.boards.values() \
                if selector.board is None else (self.boards.get(selector.board),)
            kinds = self.kinds[selector] = frozenset(
                b.device_type for b in boards
                if b is not None and b.device_type and matches(selector, self.view(b)))
        return kinds

    def board_index(self) -> BoardIndex:
        """On the owner's thread: the available boards, indexed, as of now (the boards whose view
        changed since the last call are viewed again; a round no longer views all 1,000)."""
        for name in self.boards.changed:
            rec = self.boards[name]
            if rec.device_type:
                self.index.put(self.view(rec))
            else:
                self.index.remove(name)
        self.boards.changed.clear()
        return self.index

    def view(self, b: BoardRecord) -> BoardView:
        """What the scheduler sees of a board; the last one again while nothing it shows changed
        (the index's `put` then sees an equal view and leaves its lists alone)."""
        available = b.state == "Idle"
        v = self.views_of.get(b.name)
        if v is None or v.available != available or v.device_type != b.device_type or \
                v.labels != b.labels:
            dt = self.rt.device_types.get(b.device_type)
            v = self.views_of[b.name] = BoardView(b.name, b.device_type, dict(b.labels),
                                                    available=available, gpu=bool(dt and dt.gpu))
        return v

    # -- who holds a board --------------------------------------------------------------------
    # (from any thread: each is made on the owner's)
    def claim(self, board: str, key: str) -> None:
        self.rt.owner.call(self._claim, board, key)

    def _claim(self, board: str, key: str) -> None:
        rec = self.boards.setdefault(board, BoardRecord(board))
        rec.run = key

    def free(self, board: str | None, key: str) -> None:
        if board:
            self.rt.owner.call(self._free, board, key)

    def _free(self, board: str, key: str) -> None:
        rec = self.boards.get(board)
        if rec is None or rec.run != key:
            return
        rec.run = None
        log.info("%s: free again (%s let go of it)", board, key)
        self.rt.wake()
        self.statuses.sync(board)

    def held(self, board: str, by: str) -> None:
        self.rt.owner.call(self._held, board, by)

    def _held(self, board: str, by: str) -> None:
        if board in self.boards:
            self.boards[board].held_by_other = by

    # -- refresh from the coordinator ---------------------------------------------------------
    def refresh(self, force: bool = False) -> None:
        """On the owner's thread: the places read back since the last refresh applied, and the
        next read started every REFRESH_EVERY (`operator.boards.places`: on a launch thread). With
        `force` (the recovery), read and applied at once."""
        if force:
            self.read_at = time.monotonic()
            read = self.reader.read_now()
        else:
            if time.monotonic() - self.read_at >= REFRESH_EVERY:
                self.read_at = time.monotonic()
                self.reader.read_soon()
            read = self.reader.take()
        if read is None:
            return
        places, changed, self.last_refresh = read      # when the applied read began
        rt = self.rt
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
        names = {*names, *self.reader.created}       # Boards created since: walked again
        direct: list[tuple[str, str]] = []
        orphans = {}
        for name in names:
            place = places.get(name)
            if place is None:       # deleted: its Board stays, as before
                self.reader.created.pop(name, None)
                continue
            uid = None
            if name not in self.boards:
                # a new place's Board: created at once by the recovery (whose refresh finds
                # every place of a new lab), else on a launch thread, walked when it is back
                uid = self.reader.created.pop(name, None)
                if uid is None:
                    kind = place.tags.get("device_type", "unknown")
                    if not force:
                        self.reader.create_soon(name, kind)
                        continue
                    uid = self.reader.create_now(name, kind)
                    if uid is None:
                        continue
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
            if uid and (run is None or run.board != name):
                orphans[name] = place.acquired
            if lease_uid is not None and leased.get(lease_uid) != name:
                orphans[name] = place.acquired    # a lease that ended while we were away
            if check is not None and (check[0] != name or name not in self.health.checking or
                                      check[1] != rec.health_check):
                orphans[name] = place.acquired    # a health check given up, or another's
            self.statuses.sync(name)
        # seen twice in a row: its runner is gone (released on a launch thread)
        released = [(name, holder) for name, holder in orphans.items()
                    if self.orphans.get(name) == holder]
        if released or direct:
            rt.launches.submit(self._release_and_report, released, direct)
        self.orphans = orphans
        rt.inventory_known = True

    def _release_and_report(self, orphans: list[tuple[str, str | None]],
                            direct: list[tuple[str, str]]) -> None:
        rt = self.rt
        for name, holder in orphans:
            log.info("releasing %s: held by %s, whose run no longer runs there", name, holder)
            try:
                rt.coordinator.release(name, holder=holder)
            except InfraError as exc:
                log.warning("could not release %s: %s", name, exc)
        for name, holder in direct:
            rt.kube.event({"apiVersion": "benchfarm.io/v1alpha1", "kind": "Board",
                           "metadata": {"name": name}}, "Warning", "DirectLock",
                          f"{name} was acquired outside benchfarm by {holder} (labgrid-client "
                          "acquire, no BoardLease): it skips the queue; the lab reports it "
                          "(LabPolicy directLocks: Report)")
