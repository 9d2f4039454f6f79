"""What the operator knows of runs and boards between two watch events: plain records, no I/O.

kopf's events about every BenchmarkRun, Board and LabPolicy reach these records through the
owner thread (`operator.state.owner`), their only writer: each record says so on every change
(`check_write`). The API server stays the source of truth: every transition is written there
first and only then mirrored here.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from benchfarm.api.boards import BoardState
from benchfarm.api.grants import GoAhead
from benchfarm.api.labpolicy import LabPolicySpec
from benchfarm.api.leases import BoardLeaseSpec, BoardLeaseStatus
from benchfarm.api.notifications import Event
from benchfarm.api.outcomes import FINISHED, LeasePhase, Phase
from benchfarm.api.runs import BenchmarkRunSpec, BenchmarkRunStatus, needs_gpu
from benchfarm.core.conditions import seconds_of
from benchfarm.core.scheduling.lifecycle import MOVES, InFlight
from benchfarm.core.scheduling.queue import QueueEntry, WaitingQueue, lease_key
from benchfarm.core.scheduling.seats import Seat
from benchfarm.kubeapi import versions
from benchfarm.kubeapi.client import Kube
from benchfarm.lab.coordinator import Coordinator
from benchfarm.operator.state.owner import Owner, check_write
from benchfarm.operator.state.pools import Workers


class Registry(Protocol):
    """What every room of the operator reads of its registry (`operator.runtime.Runtime` is one):
    the owner of these records, the API client, the coordinator, the LabPolicy, the key that
    signs what sessions may do, the launch threads and a wake-up. Each room that must not import
    the runtime declares one Protocol of its own that adds what else it needs
    (`operator.runs.writes.RunsRuntime`, `operator.leases.book.LeaseRuntime`,
    `operator.boards.health.HealthRuntime` and the inventory's `InventoryRuntime`)."""

    @property
    def owner(self) -> Owner: ...

    @property
    def kube(self) -> Kube: ...

    @property
    def coordinator(self) -> Coordinator: ...

    @property
    def policy(self) -> LabPolicySpec: ...

    @property
    def signing_key(self) -> bytes: ...

    @property
    def launches(self) -> Workers: ...     # the launch threads: writes no round waits for

    def wake(self) -> None:
        """A scheduler iteration soon (from any thread)."""

    def notify(self, event: Event) -> None:
        """Something a Notification may subscribe to happened (`operator.notifications.notifier`; never waits)."""


def ts(iso: str | None) -> float:
    if not iso:
        return time.time()
    return seconds_of(iso)


@dataclass(frozen=True, slots=True)
class RunHead:
    """What the operator reads of a run's status, read from its model (`BenchmarkRunStatus`)
    once per change of the status and kept: the whole model is 4 KB a run (its conditions and
    resolved suites parsed into objects of their own), 44 MB for 10,000 queued runs; this is
    under 200 bytes (tests/unit/test_status_reads.py). `suites`: how many suites are
    resolved; `gpu`: whether one needs a GPU."""

    phase: str | None = None
    board: str | None = None
    boardReleased: bool | None = None
    startTime: str | None = None
    completionTime: str | None = None
    avoidBoards: tuple[str, ...] = ()
    resumes: int | None = None
    busyRequeues: int | None = None
    goAhead: GoAhead | None = None
    suites: int = 0
    gpu: bool = False

    @classmethod
    def of(cls, st: BenchmarkRunStatus) -> RunHead:
        suites = st.resolvedSuites or []
        return cls(st.phase, st.board, st.boardReleased, st.startTime, st.completionTime,
                   tuple(st.avoidBoards or ()), st.resumes, st.busyRequeues, st.goAhead,
                   len(suites), needs_gpu(suites))


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
    in_flight: InFlight = InFlight.none   # the operator's decision on its way (`move`)
    # derived once, not every scheduling round: (fingerprint, value)
    queue_entry: tuple[Any, Any] | None = None
    completed_at: tuple[str, float] | None = None
    position_writes: int = 0        # queuePosition writes so far (capped: a run's write budget)
    avoid_boards: tuple[str, ...] = ()   # boards a campaign's retried column must not get
    seat: Seat = field(default_factory=lambda: Seat())    # its session seat (`Seat`)
    version: str | None = None      # the newest resourceVersion known: events' and own writes'
    # what the operator reads of `status`, read through its model once per change of `status`
    # (`head`): a record's status is only ever replaced, never changed in place
    _head: RunHead | None = field(default=None, repr=False, compare=False)

    def __setattr__(self, key: str, value: Any) -> None:
        check_write("run")
        object.__setattr__(self, key, value)
        if key == "status":
            object.__setattr__(self, "_head", None)

    @property
    def head(self) -> RunHead:
        """What the operator reads of its status (read at the first read after a change; any
        thread may read it: two reads of one status are equal)."""
        head = self._head
        if head is None:
            head = RunHead.of(BenchmarkRunStatus.of(self.status))
            object.__setattr__(self, "_head", head)
        return head

    def take(self, status: dict[str, Any], typed: BenchmarkRunStatus) -> None:
        """A watch event's status, with its model (parsed once for the event)."""
        self.status = status
        self._head = RunHead.of(typed)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def move(self, to: InFlight) -> bool:
        """The operator decided (or its write landed: `InFlight.none`), on the owner's thread;
        False, and no change, where `MOVES` does not allow it (a decision already on its way)."""
        if to not in MOVES[self.in_flight]:
            return False
        self.in_flight = to
        return True

    @property
    def starting(self) -> bool:
        """Picked by the scheduler: its launch (the Running write) on its way."""
        return self.in_flight in (InFlight.launch_seated, InFlight.launch_standby)

    @property
    def granting(self) -> bool:
        """A session seat given: its launch with one, or its go-ahead, on its way."""
        return self.in_flight in (InFlight.launch_seated, InFlight.go_ahead)

    @property
    def phase(self) -> str | None:
        return self.head.phase

    @property
    def board(self) -> str | None:
        """The board its status names."""
        return self.head.board

    @property
    def released(self) -> bool:
        """Its session released its board (it only uploads and reports now)."""
        return bool(self.head.boardReleased)

    def wrote(self, written: dict[str, Any], status: dict[str, Any]) -> None:
        """After the operator's own status write (on the owner's thread): the status as the API
        server wrote it (`status` where its answer has none), and its version, so that no watch
        event from before the write undoes it (`kubeapi.versions`)."""
        version = versions.of(written)
        if versions.older(version, self.version):   # a later event came first: it has this write
            return
        self.status = dict(written["status"]) if version and "status" in written else \
            {**self.status, **status}
        self.version = version or self.version

    def stale(self, body: dict[str, Any]) -> bool:
        """A watch event from before what the operator knows of the run (its own last write)."""
        return versions.older(versions.of(body), self.version)

    @property
    def waiting(self) -> bool:
        """In the queue: Pending, no decision of the operator on its way (a launch, or the
        go-ahead of a session that has since handed the run back), not deleted or cancelled."""
        return self.phase == Phase.pending and self.in_flight is InFlight.none and \
            not self.deleting and not self.spec.cancel

    @property
    def active(self) -> bool:
        """Being started, or running (holding its board, or uploading after releasing it)."""
        return self.phase == Phase.running or self.starting

    def ref(self) -> dict[str, Any]:
        return {"apiVersion": "benchfarm.io/v1alpha1", "kind": "BenchmarkRun",
                "metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid}}


@dataclass
class LeaseState:
    """A BoardLease as the operator knows it: in the queue, granted (a person holds its board
    until `status.expiresAt`), or ending (its end session powers the board off)."""

    namespace: str
    name: str
    uid: str
    generation: int
    created: float
    spec: BoardLeaseSpec
    status: dict[str, Any]
    deleting: bool = False
    starting: bool = False          # picked by the scheduler, its grant not yet written
    queue_entry: tuple[Any, Any] | None = None
    ending_since: float | None = None   # monotonic: when its end session was launched
    busy: bool = False              # an end or a retake on a launch thread
    granted_at: float = 0.0         # monotonic: when its lock was (re)taken
    _typed: BoardLeaseStatus | None = field(default=None, repr=False, compare=False)   # as a run's

    def __setattr__(self, key: str, value: Any) -> None:
        check_write("lease")
        object.__setattr__(self, key, value)
        if key == "status":
            object.__setattr__(self, "_typed", None)

    @property
    def typed(self) -> BoardLeaseStatus:
        """Its status as `BoardLeaseStatus` (parsed at the first read after a change)."""
        typed = self._typed
        if typed is None:
            typed = BoardLeaseStatus.of(self.status)
            object.__setattr__(self, "_typed", typed)
        return typed

    @property
    def key(self) -> str:
        return lease_key(self.namespace, self.name)

    @property
    def phase(self) -> str | None:
        return self.typed.phase

    @property
    def waiting(self) -> bool:
        return self.phase == LeasePhase.pending and not self.starting and not self.deleting \
            and not self.spec.release

    @property
    def active(self) -> bool:
        """Holding its board: being granted, granted, or powering it off."""
        return self.starting or self.phase in (LeasePhase.granted, LeasePhase.releasing)

    def ref(self) -> dict[str, Any]:
        return {"apiVersion": "benchfarm.io/v1alpha1", "kind": "BoardLease",
                "metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid}}


class RunIndex:
    """What the scheduler's loop reads, kept current as runs change, so no step of a round walks
    every run the operator knows (10,000 queued, and every finished one): the waiting queue in
    order, the active runs, waiting runs with a queue timeout, finished runs with a TTL.

    The runtime calls `update` on the owner's thread after every change to a run (a watch event, a
    status it wrote, starting, cancel), and `forget` when the run is deleted."""

    def __init__(self) -> None:
        self.queue = WaitingQueue()
        self.active: dict[str, RunState] = {}
        self.queue_timeouts: dict[str, RunState] = {}
        self.ttl: dict[str, RunState] = {}
        self.leases: dict[str, LeaseState] = {}     # the active ones (they hold a board)

    def update_lease(self, lease: LeaseState, entry: QueueEntry | None) -> None:
        """A lease's place in the queue (`entry` while it waits), and among the active."""
        check_write("index")
        if entry is not None:
            self.queue.put(entry)
        else:
            self.queue.discard(lease.key)
        if lease.active:
            self.leases[lease.key] = lease
        else:
            self.leases.pop(lease.key, None)

    def update(self, run: RunState, entry: QueueEntry | None) -> None:
        """`entry`: the run as the queue sees it, when it waits."""
        check_write("index")
        key = run.key
        if entry is not None:
            self.queue.put(entry)
        else:
            self.queue.discard(key)
        _keep(self.active, key, run, run.active)
        _keep(self.queue_timeouts, key, run, entry is not None and
              bool(run.spec.queueTimeoutSeconds))
        _keep(self.ttl, key, run, run.phase in FINISHED and
              run.spec.ttlSecondsAfterFinished is not None)

    def forget(self, key: str) -> None:
        check_write("index")
        self.queue.discard(key)
        for d in (self.active, self.queue_timeouts, self.ttl, self.leases):
            d.pop(key, None)


def _keep(d: dict[str, RunState], key: str, run: RunState, present: bool) -> None:
    if present:
        d[key] = run
    else:
        d.pop(key, None)


# what the scheduler sees of a board (`Inventory.view`): a change of one is noted (`Boards`)
VIEWED = frozenset({"device_type", "labels", "online", "held_by_other", "maintenance", "run",
                    "quarantined_since"})


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
    uid: str = ""                   # the Board object's (a health check's Lease is owned by it)
    holder: str | None = None       # who the coordinator says holds the place (last refresh)
    direct_lock: str | None = None  # a lock outside benchfarm, reported (LabPolicy directLocks)
    conditions: list[dict[str, Any]] = field(default_factory=list)
    health_check: int = 0           # the number of its latest health check (status.healthCheck)
    # where a change of what the scheduler sees of it is noted (`Boards.changed`), wherever in
    # the operator it is made: the rounds re-view only those boards, never all 1,000
    changes: set[str] | None = field(default=None, repr=False, compare=False)

    def __setattr__(self, key: str, value: Any) -> None:
        check_write("board")
        if key in VIEWED:
            changes = self.__dict__.get("changes")
            if changes is not None and self.__dict__.get(key) != value:
                changes.add(self.name)
        object.__setattr__(self, key, value)

    @property
    def state(self) -> str:
        if self.quarantined_since is not None:  # also while its health check runs
            return BoardState.quarantined.value
        if self.run:
            return BoardState.busy.value
        if not self.online:
            return BoardState.offline.value
        if self.maintenance:
            return BoardState.maintenance.value
        if self.held_by_other:
            return BoardState.busy.value
        return BoardState.idle.value


M = TypeVar("M", bound=BaseModel)


def written(model: type[M], status: dict[str, Any], field: str) -> M | None:
    """What a session wrote into `status[field]` (its `sessionEnd`, a check's `healthCheckEnd`),
    read as the typed definition both programs share; None when absent or not one (logged)."""
    raw = status[field] if field in status else None
    if not raw:
        return None
    try:
        return model.model_validate(raw)
    except ValueError as exc:
        logging.getLogger("benchfarm").warning("ignoring a %s that is not one: %s", field, exc)
        return None


K = TypeVar("K")
V = TypeVar("V")


class Owned(dict[K, V]):
    """A dict of the lab's records (runs by key, leases by key, launches by run): each change
    says so to `check_write`, under `what`, like the records themselves."""

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what

    def __setitem__(self, key: K, value: V) -> None:
        check_write(self.what)
        super().__setitem__(key, value)

    def __delitem__(self, key: K) -> None:
        check_write(self.what)
        super().__delitem__(key)

    def pop(self, key: K, *default: Any) -> Any:
        check_write(self.what)
        return super().pop(key, *default)

    def setdefault(self, key: K, default: Any = None) -> Any:
        check_write(self.what)
        return super().setdefault(key, default)

    def clear(self) -> None:
        check_write(self.what)
        super().clear()


class Boards(Owned[str, BoardRecord]):
    """The board records by name; `changed` names those whose view changed since it was last
    emptied (a record added, or one of its VIEWED fields set). Its changes are the owner's, like
    every dict of records (`Owned`)."""

    def __init__(self) -> None:
        super().__init__("board")
        self.changed: set[str] = set()

    def __setitem__(self, name: str, rec: BoardRecord) -> None:
        rec.changes = self.changed
        super().__setitem__(name, rec)
        self.changed.add(name)

    def setdefault(self, name: str, rec: BoardRecord | None = None) -> BoardRecord:
        if name not in self:
            assert rec is not None
            self[name] = rec
        return self[name]
