"""The board inventory: labgrid places mirrored as Board objects, quarantine and health checks.

Places come from the coordinator (who holds what, tags, resources); Board objects carry what
benchfarm adds (maintenance, consecutive board faults, quarantine). Only board faults reach
`board_failed`: outages and busy boards never count. A place still held by the session of a run
that is no longer running on it (its runner died) is released here, so no board is lost.

Board status is written to the API by a thread of its own, the latest state per board, so the
scheduler never waits on those writes (at a thousand boards turning over, a refresh wrote a few a
second, each 50-200 ms under load, before the round could give a freed board to the next run).

What the inventory needs of the operator is `InventoryRuntime` (the registry's lock, the API, the
coordinator, the device types, the policy, the active runs, a wake-up; it sets `inventory_known`):
it imports neither the runtime nor the session supervisor.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from ..core import queue as q
from ..errors import InfraError
from ..lab.board import Board, SerialLog
from ..lab.coordinator import SESSION_HOST
from . import metrics
from .state import BoardRecord, RunState, ts

if TYPE_CHECKING:
    from ..api.devicetype import DeviceType
    from ..api.models import LabPolicySpec
    from ..kubeapi.client import Kube
    from ..lab.coordinator import Coordinator

log = logging.getLogger("benchfarm")
REFRESH_EVERY = 3.0
HEALTH_CHECK_CONSOLE = 1024 * 1024   # bytes of a health check's console held in memory


def run_uid_of(holder: str | None) -> str | None:
    """The run uid behind a labgrid holder identity of one of our sessions, if it is one."""
    prefix = f"{SESSION_HOST}/run-"
    return holder[len(prefix):] if holder and holder.startswith(prefix) else None


class InventoryRuntime(Protocol):
    """What the inventory needs of the operator's registry (`kube.runtime.Runtime` is one)."""

    inventory_known: bool       # set once the coordinator's places have been read

    @property
    def lock(self) -> AbstractContextManager[Any]: ...

    @property
    def kube(self) -> Kube: ...

    @property
    def coordinator(self) -> Coordinator: ...

    @property
    def device_types(self) -> Mapping[str, DeviceType]: ...

    @property
    def policy(self) -> LabPolicySpec: ...

    def active_runs(self) -> list[RunState]: ...

    def wake(self) -> None: ...


class Inventory:
    def __init__(self, rt: InventoryRuntime) -> None:
        self.rt = rt
        self.boards: dict[str, BoardRecord] = {}
        self.last_refresh = 0.0
        self.checking: set[str] = set()     # boards whose health check runs
        self.orphans: dict[str, str | None] = {}          # place -> holder seen orphaned last refresh
        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="health")
        self.publisher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="board-status")
        self.unpublished: dict[str, dict[str, Any]] = {}      # board -> the status to write next
        self.views_of: dict[str, q.BoardView] = {}   # the last view of each board (see `view`)

    def close(self) -> None:
        """The last statuses are written before the operator exits."""
        self.publisher.shutdown(wait=True)

    def load(self) -> None:
        for board in self.rt.kube.list_cluster("boards"):
            st = board.get("status") or {}
            rec = self.boards.setdefault(board["metadata"]["name"],
                                         BoardRecord(board["metadata"]["name"]))
            rec.failures = int(st.get("consecutiveInfraFailures") or 0)
            rec.maintenance = bool((board.get("spec") or {}).get("maintenance"))
            if st.get("state") == "Quarantined":
                rec.quarantined_since = ts(st.get("quarantinedAt"))
                rec.reason = st.get("reason")

    def views(self) -> list[q.BoardView]:
        with self.rt.lock:
            return [self.view(b) for b in self.boards.values() if b.device_type]

    def view(self, b: BoardRecord) -> q.BoardView:
        """What the scheduler sees of a board; the last one again while nothing it shows changed
        (every round views every board: building 1,000 anew cost a round 6-9 ms)."""
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
        self.sync(board)
        self.rt.wake()

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
            places = rt.coordinator.places()
            metrics.PLACES.set(time.perf_counter() - t0)
        except InfraError as exc:
            log.warning("labgrid coordinator unavailable: %s", exc)
            return
        running_uids = {r.uid: r for r in rt.active_runs()}
        orphans = {}
        for name, place in places.items():
            with rt.lock:
                rec = self.boards.get(name)
                if rec is None:
                    rec = self.boards[name] = BoardRecord(name)
                    rt.kube.create_board(name, {"benchfarm.io/device-type":
                                                place.tags.get("device_type", "unknown")})
                rec.device_type = place.tags.get("device_type", "")
                rec.labels = {k: v for k, v in place.tags.items() if k != "device_type"}
                rec.online = bool(place.resources) and rec.device_type in rt.device_types
                uid = run_uid_of(place.acquired)
                ours = place.acquired == rt.coordinator.identity or uid is not None
                rec.held_by_other = None if (place.free or ours) else \
                    (place.acquired or f"reserved {place.reserved_by}")
                run = running_uids.get(uid) if uid else None
                if uid and (run is None or run.status.get("board") != name):
                    orphans[name] = place.acquired
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

    def sync(self, name: str) -> None:
        with self.rt.lock:
            rec = self.boards.get(name)
            if rec is None:
                return
            status = {"deviceType": rec.device_type, "labels": rec.labels, "state": rec.state,
                      "run": rec.run or (f"labgrid: {rec.held_by_other}" if rec.held_by_other
                                         else None),
                      "consecutiveInfraFailures": rec.failures, "reason": rec.reason,
                      "quarantinedAt": datetime.fromtimestamp(rec.quarantined_since, UTC)
                      .strftime("%Y-%m-%dT%H:%M:%SZ") if rec.quarantined_since else None}
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
        except Exception as exc:  # the API's outage: written again at the next refresh
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
            metrics.INFRA_FAILURES.labels(board, exc.reason).inc()
            rec.failures += 1
            rec.reason = f"{exc.reason}: {exc}"[:500]
            quarantined = rec.failures >= rt.policy.quarantineAfterFailures and \
                rec.quarantined_since is None
            if quarantined:
                rec.quarantined_since = time.time()
        self.sync(board)
        if quarantined:
            rt.kube.event({"apiVersion": "benchfarm.io/v1alpha1", "kind": "Board",
                           "metadata": {"name": board}}, "Warning", "Quarantined",
                          f"{board} quarantined after {rec.failures} board faults: {rec.reason}")
        return quarantined

    def health_checks(self) -> None:
        now = time.time()
        rt = self.rt
        with rt.lock:
            due = [b for b in self.boards.values()
                   if b.quarantined_since is not None and not b.run and not b.held_by_other
                   and b.online and b.name not in self.checking
                   and now - b.quarantined_since >= rt.policy.quarantineCooldownSeconds]
            for b in due:
                self.checking.add(b.name)
                b.run = "(health check)"
        for b in due:
            self.pool.submit(self._health_check, b.name)

    def _health_check(self, name: str) -> None:
        """Boot a quarantined board to its prompt; back to Idle if it makes it."""
        rt = self.rt
        ok = False
        try:
            dt = rt.device_types[self.boards[name].device_type]
            rt.coordinator.acquire(name)
            try:
                # the console in memory, bounded: its first and last bytes, the cut said
                board = Board(name, rt.coordinator.places()[name].resources, dt,
                              rt.coordinator.session(), SerialLog(limit=HEALTH_CHECK_CONSOLE))
                try:
                    board.boot()
                    ok = True
                finally:
                    try:
                        board.power_off()
                    finally:
                        board.close()
            finally:
                rt.coordinator.release(name)
        except Exception as exc:
            log.info("health check of %s failed: %s", name, exc)
            code = getattr(exc, "reason", type(exc).__name__)
            with rt.lock:
                self.boards[name].reason = f"health check failed: {code}: {exc}"[:500]
        with rt.lock:
            rec = self.boards[name]
            rec.run = None
            if ok:
                rec.quarantined_since, rec.failures, rec.reason = None, 0, None
            else:
                rec.quarantined_since = time.time()
            self.checking.discard(name)
        self.sync(name)
        rt.kube.event({"apiVersion": "benchfarm.io/v1alpha1", "kind": "Board",
                       "metadata": {"name": name}}, "Normal" if ok else "Warning",
                      "HealthCheckPassed" if ok else "HealthCheckFailed",
                      f"{name} {'booted to its prompt; back in service' if ok else 'still fails'}")
        rt.wake()
