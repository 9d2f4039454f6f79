"""Who waits for a board: one global queue, fair across teams, never two holders on one board.

Runs and people's board leases wait in the same queue (`QueueEntry.kind`): a lease is one more
entry of its namespace, under the same priority ceilings, round-robin and board limits.

The waiting runs are kept sorted between rounds (`WaitingQueue`: a run costs O(log n) when it
arrives or leaves, not a sort of the whole queue every round). The order in which they get boards
is `fairness`'s, the free boards they may get `boardindex`'s, and a round that gives boards to
them `assignment`'s.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True)
class Selector:
    device_type: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    board: str | None = None

    @classmethod
    def of(cls, device_type: str | None = None, labels: Mapping[str, str] | None = None,
           board: str | None = None) -> Selector:
        return cls(device_type, tuple(sorted((labels or {}).items())), board)


class EntryKind(StrEnum):
    """What waits for a board: a BenchmarkRun (its session drives the board) or a BoardLease (a
    person drives it, for a while)."""

    run = "BenchmarkRun"
    lease = "BoardLease"


@dataclass(frozen=True)
class QueueEntry:
    key: str                      # "<namespace>/<name>" of a run; `lease_key` of a lease
    namespace: str
    priority: int
    created: float                # seconds; older runs first at equal priority
    selector: Selector
    avoid: frozenset[str] = frozenset()   # boards this run already failed on
    needs_gpu: bool = False
    kind: EntryKind = EntryKind.run


LEASE_PREFIX = "lease:"


def lease_key(namespace: str, name: str) -> str:
    """A lease's key in the queue (and on its Board): never the same as a run's of that name."""
    return f"{LEASE_PREFIX}{namespace}/{name}"


def lease_of(key: str) -> str | None:
    """'<namespace>/<name>' of the lease a key (a Board's status.run) names; None for a run."""
    return key[len(LEASE_PREFIX):] if key.startswith(LEASE_PREFIX) else None


class WaitingQueue:
    """The waiting runs, sorted between rounds: by priority, then namespace, then age.

    Each (priority, namespace) holds its runs oldest first; a run costs O(log n) plus a short
    memmove when it arrives, changes or leaves. It also counts the runs asking for each kind of
    board (selector and GPU need), so a round knows when no waiting run can fit what is free.
    """

    def __init__(self, runs: Iterable[QueueEntry] = ()) -> None:
        self._lists: dict[int, dict[str, list[tuple[float, str, QueueEntry]]]] = {}
        self._runs: dict[str, QueueEntry] = {}
        self._demand: Counter[tuple[Selector, bool]] = Counter()
        for run in runs:
            self.put(run)

    def __len__(self) -> int:
        return len(self._runs)

    def __contains__(self, key: str) -> bool:
        return key in self._runs

    def get(self, key: str) -> QueueEntry | None:
        return self._runs.get(key)

    def put(self, run: QueueEntry) -> None:
        """Add the run, or replace what the queue knew of it."""
        old = self._runs.get(run.key)
        if old == run:
            return
        if old is not None:
            self.discard(run.key)
        self._runs[run.key] = run
        per_ns = self._lists.setdefault(run.priority, {})
        bisect.insort(per_ns.setdefault(run.namespace, []), (run.created, run.key, run))
        self._demand[(run.selector, run.needs_gpu)] += 1

    def discard(self, key: str) -> None:
        run = self._runs.pop(key, None)
        if run is None:
            return
        per_ns = self._lists[run.priority]
        runs = per_ns[run.namespace]
        del runs[bisect.bisect_left(runs, (run.created, run.key))]
        if not runs:
            del per_ns[run.namespace]
            if not per_ns:
                del self._lists[run.priority]
        demand = (run.selector, run.needs_gpu)
        self._demand[demand] -= 1
        if not self._demand[demand]:
            del self._demand[demand]

    def keys(self) -> Iterable[str]:
        return self._runs.keys()

    def oldest(self) -> float | None:
        """When the entry waiting longest was created (None: none waits): the first of each
        (priority, namespace), so a look at each of those, not at every run."""
        return min((runs[0][0] for per_ns in self._lists.values() for runs in per_ns.values()),
                   default=None)

    def namespaces(self) -> set[str]:
        return {ns for per_ns in self._lists.values() for ns in per_ns}

    def demands(self) -> Collection[tuple[Selector, bool]]:
        """Each kind of board some waiting run asks for, once."""
        return self._demand.keys()

    def priorities(self) -> list[int]:
        """Highest first."""
        return sorted(self._lists, reverse=True)

    def by_namespace(self, priority: int) -> Mapping[str, Sequence[tuple[float, str, QueueEntry]]]:
        """The runs of one priority per namespace, oldest first, as (created, key, run)."""
        return self._lists.get(priority, {})
