"""Who gets which board next: one global queue, fair across teams, never two holders on one board.

Runs and people's board leases wait in the same queue (`QueueEntry.kind`): a lease is one more
entry of its namespace, under the same priority ceilings, round-robin and board limits.

Pure code over plain values so it can be benchmarked with a thousand simulated boards and tens of
thousands of queued runs (benchmarks/scheduler_bench.py). Order: priority (higher first), then a
fairness policy among runs of equal priority (round-robin across namespaces by default, oldest
first within a namespace). A run goes only to an available board matching its selector; a
namespace over its board limit waits.

The waiting runs are kept sorted between rounds (`WaitingQueue`: a run costs O(log n) when it
arrives or leaves, not a sort of the whole queue every round), and a round walks them in order
from the front, lazily, and stops as soon as nothing more can start: no free board, no session
slot, or no kind of run left that fits a free board. Free boards are indexed by board, device
type, label and GPU, kept between rounds (`BoardIndex`: a board that changes moves in or out of
it); runs asking for the same thing share one pass over the shortest index list it names. So a
round costs what it assigns plus the runs it passes that fit nothing free (O(1) each), never a
pass over the whole queue to order it, nor over all the boards to index them. A namespace at its
ceiling when the round starts is passed over whole, not run by run.
"""

from __future__ import annotations

import bisect
import heapq
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol


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


@dataclass(frozen=True)
class BoardView:
    name: str
    device_type: str
    labels: Mapping[str, str] = field(default_factory=dict)
    available: bool = True        # idle, not drained, not quarantined, free in labgrid
    gpu: bool = False


def matches(selector: Selector, board: BoardView) -> bool:
    if selector.board is not None and selector.board != board.name:
        return False
    if selector.device_type is not None and selector.device_type != board.device_type:
        return False
    return all(board.labels.get(k) == v for k, v in selector.labels)


def could_ever_match(selector: Selector, boards: Iterable[BoardView]) -> bool:
    """Whether any board of the inventory (busy or not) fits; if none, waiting is pointless."""
    return any(matches(selector, b) for b in boards)


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


class FairnessPolicy(Protocol):
    def walk(self, queue: WaitingQueue, passing: Collection[str] = ()) -> Iterator[QueueEntry]:
        """The waiting runs in the order they get boards, lazily: a round reads only as far as
        it needs. The order is fixed when `walk` is called (`served` during the walk changes the
        next round's order, not this one's). The runs of the namespaces in `passing` are left
        out (a namespace at its ceiling): what is left keeps its order."""
        ...

    def order(self, runs: Iterable[QueueEntry]) -> list[QueueEntry]: ...

    def served(self, run: QueueEntry, now: float) -> None: ...


class RoundRobinFairness:
    """At equal priority, namespaces take turns; the one served longest ago goes first."""

    def __init__(self) -> None:
        self.last_served: dict[str, float] = {}

    def served(self, run: QueueEntry, now: float) -> None:
        self.last_served[run.namespace] = now

    def walk(self, queue: WaitingQueue, passing: Collection[str] = ()) -> Iterator[QueueEntry]:
        return self._walk(queue, dict(self.last_served), passing)

    @staticmethod
    def _walk(queue: WaitingQueue, last_served: Mapping[str, float],
              passing: Collection[str]) -> Iterator[QueueEntry]:
        for priority in queue.priorities():
            per_ns = queue.by_namespace(priority)
            turn = sorted((ns for ns in per_ns if ns not in passing),
                          key=lambda ns: (last_served.get(ns, float("-inf")), per_ns[ns][0][0], ns))
            depth = 0
            while turn:
                next_turn = []
                for ns in turn:
                    runs = per_ns[ns]
                    yield runs[depth][2]
                    if len(runs) > depth + 1:
                        next_turn.append(ns)
                turn = next_turn
                depth += 1

    def order(self, runs: Iterable[QueueEntry]) -> list[QueueEntry]:
        return list(self.walk(WaitingQueue(runs)))


class StrictOrder:
    """Priority then age, ignoring namespaces (for labs that want plain FIFO)."""

    def served(self, run: QueueEntry, now: float) -> None:
        return None

    def walk(self, queue: WaitingQueue, passing: Collection[str] = ()) -> Iterator[QueueEntry]:
        for priority in queue.priorities():
            per_ns = queue.by_namespace(priority)
            for _, _, run in heapq.merge(*(runs for ns, runs in per_ns.items()
                                           if ns not in passing)):
                yield run

    def order(self, runs: Iterable[QueueEntry]) -> list[QueueEntry]:
        return list(self.walk(WaitingQueue(runs)))


@dataclass(frozen=True)
class Assignment:
    run: str
    board: str


@dataclass
class Decision:
    assignments: list[Assignment]
    # the queue as it stands after this round (assigned runs removed): all of it, or its first
    # `head` runs when the round was asked for only those
    order: list[QueueEntry]


def _name(b: BoardView) -> str:
    return b.name


class BoardIndex:
    """The available boards, indexed by what selectors name, kept from one round to the next.

    A run naming a device type tries that type's boards by name; a run naming none tries the
    types one after another (in the order of each type's first board by name), each by name.
    Every candidate list keeps that order.

    A board that changes moves in or out of a few lists kept sorted by name (`put`: a bisect
    each), where building the index anew for every round walked and sorted all 1,000 boards:
    2-3 ms of a round's own CPU, each ms of it stretched several times over on a busy host
    while other threads took the GIL in between.
    """

    def __init__(self, boards: Iterable[BoardView] = ()) -> None:
        self.views: dict[str, BoardView] = {}            # every available board by name
        self.by_type: dict[str, list[BoardView]] = {}    # each by name
        # a label or the GPU: that type's boards bearing it, by name
        self.by_label: dict[tuple[str, str], dict[str, list[BoardView]]] = defaultdict(dict)
        self.with_gpu: dict[str, list[BoardView]] = {}
        self._types: list[str] | None = None             # types by their first board's name
        self._ordered: list[BoardView] | None = None
        for b in sorted(boards, key=_name):     # by name: each list grows at its end
            if b.available and b.name not in self.views:
                self.views[b.name] = b
                for lists, kind in self._lists(b):
                    lists.setdefault(kind, []).append(b)

    def __len__(self) -> int:
        return len(self.views)

    def put(self, view: BoardView) -> None:
        """A board as it is now: indexed while available, out of the index while not."""
        old = self.views.get(view.name)
        if old == view:
            return
        if old is not None:
            self._drop(old)
        if view.available:
            self._add(view)

    def remove(self, name: str) -> None:
        old = self.views.get(name)
        if old is not None:
            self._drop(old)

    def _lists(self, b: BoardView) -> Iterator[tuple[dict[str, list[BoardView]], str]]:
        yield self.by_type, b.device_type
        for pair in b.labels.items():
            yield self.by_label[pair], b.device_type
        if b.gpu:
            yield self.with_gpu, b.device_type

    def _add(self, b: BoardView) -> None:
        self.views[b.name] = b
        for lists, kind in self._lists(b):
            bisect.insort(lists.setdefault(kind, []), b, key=_name)
        self._types = self._ordered = None

    def _drop(self, b: BoardView) -> None:
        del self.views[b.name]
        for lists, kind in self._lists(b):
            of_kind = lists[kind]
            del of_kind[bisect.bisect_left(of_kind, b.name, key=_name)]
            if not of_kind:
                del lists[kind]
        for pair in b.labels.items():
            if not self.by_label[pair]:
                del self.by_label[pair]
        self._types = self._ordered = None

    def types(self) -> list[str]:
        if self._types is None:
            self._types = sorted(self.by_type, key=lambda t: self.by_type[t][0].name)
        return self._types

    def ordered(self) -> list[BoardView]:
        """Every available board in the order a run naming nothing tries them."""
        if self._ordered is None:
            self._ordered = [b for t in self.types() for b in self.by_type[t]]
        return self._ordered

    def _across(self, lists: dict[str, list[BoardView]]) -> list[BoardView]:
        if len(lists) == 1:
            return next(iter(lists.values()))
        return [b for t in self.types() if t in lists for b in lists[t]]

    def candidates(self, selector: Selector, needs_gpu: bool) -> list[BoardView]:
        """The shortest list holding every free board that could fit (a superset), in order."""
        if selector.board is not None:
            named = self.views.get(selector.board)
            return [named] if named is not None else []
        options: list[dict[str, list[BoardView]]] = []
        if selector.device_type is not None:
            of_type = self.by_type.get(selector.device_type)
            if of_type is None:
                return []
            options.append({selector.device_type: of_type})
        for pair in selector.labels:
            with_label = self.by_label.get(pair)
            if not with_label:
                return []
            options.append(with_label)
        if needs_gpu:
            if not self.with_gpu:
                return []
            options.append(self.with_gpu)
        if not options:
            return self.ordered()
        shortest = min(options, key=lambda lists: sum(len(v) for v in lists.values()))
        return self._across(shortest)


class _FreeBoards:
    """A round's view of the index: the boards it has taken so far (the index stays as it is)."""

    def __init__(self, index: BoardIndex) -> None:
        self.index = index
        self.count = len(index)
        self.taken: set[str] = set()

    def candidates(self, selector: Selector, needs_gpu: bool) -> list[BoardView]:
        return self.index.candidates(selector, needs_gpu)


class _Demand:
    """The free boards that fit one selector and GPU need, found in order and walked once a round.

    Boards taken during the round are skipped for good (`skip` points past them, with path
    compression), so picking costs amortised O(1) plus one step per avoided board passed.
    """

    def __init__(self, selector: Selector, needs_gpu: bool, candidates: list[BoardView]) -> None:
        self.selector = selector
        self.needs_gpu = needs_gpu
        self.unread = iter(candidates)
        self.fits: list[BoardView] = []
        self.skip: list[int] = []      # skip[i] == i: fits[i] may be free; else look at skip[i]
        self.exhausted = False         # every fitting board is taken: later runs need not look

    def _has(self, i: int) -> bool:
        """Whether a fitting board i exists, reading candidates as far as needed."""
        while len(self.fits) <= i:
            b = next(self.unread, None)
            if b is None:
                return False
            if matches(self.selector, b) and (b.gpu or not self.needs_gpu):
                self.skip.append(len(self.fits))
                self.fits.append(b)
        return True

    def _free_from(self, i: int, taken: set[str]) -> int:
        """The first fitting board at or after i not taken yet; len(fits) if there is none."""
        passed = []
        while self._has(i):
            if self.skip[i] != i:
                passed.append(i)
                i = self.skip[i]
            elif self.fits[i].name in taken:
                passed.append(i)
                i += 1
            else:
                break
        for p in passed:
            self.skip[p] = i
        return i

    def first_free(self, taken: set[str]) -> BoardView | None:
        """The first fitting board the round has not taken yet."""
        i = self._free_from(0, taken)
        return self.fits[i] if i < len(self.fits) else None

    def pick(self, avoid: frozenset[str], taken: set[str]) -> BoardView | None:
        i = self._free_from(0, taken)
        self.exhausted = i == len(self.fits)
        while i < len(self.fits) and self.fits[i].name in avoid:
            i = self._free_from(i + 1, taken)
        return self.fits[i] if i < len(self.fits) else None


def schedule(runs: Iterable[QueueEntry] | WaitingQueue, boards: Sequence[BoardView] | BoardIndex, *,
             running_per_namespace: Mapping[str, int] | None = None,
             max_boards: Mapping[str, int] | None = None,
             fairness: FairnessPolicy | None = None, now: float = 0.0,
             max_assignments: int | None = None, head: int | None = None) -> Decision:
    """One scheduling round: give available boards to the first runs that fit them.

    `max_assignments` is how many sessions can start right now (the launcher's free slots): a
    board is given only to a run whose session starts at once, never marked Busy to wait.
    `head`: return only the first `head` runs still waiting (what queue positions need); the
    walk then stops as soon as nothing more can start. The queue itself is not changed."""
    fairness = fairness or RoundRobinFairness()
    queue = runs if isinstance(runs, WaitingQueue) else WaitingQueue(runs)
    running = dict(running_per_namespace or {})
    limits = max_boards or {}
    free = _FreeBoards(boards if isinstance(boards, BoardIndex) else BoardIndex(boards))
    demands: dict[tuple[Selector, bool], _Demand] = {}
    slots = (1 << 30) if max_assignments is None else max(0, max_assignments)
    # kinds of run that may still fit a free board: each kind's free boards are looked up when
    # the walk first meets a run of that kind (a round that starts one run meets a few kinds,
    # not the thousand a queue of pinned runs holds); until then a kind counts as may-fit
    live = len(queue.demands()) if free.count and slots else 0
    # namespaces at their ceiling when the round starts: the walk passes them over whole, and
    # when no other is left it stops (a LabPolicy that pauses every team with 7,000 runs queued
    # made each round walk them all: 30 ms of its own CPU; with one namespace left, a probe of
    # the full bench walked the 4,000 paused runs of higher priority: 25 ms a round)
    unlimited = 1 << 30
    namespaces = queue.namespaces()
    closed = {ns for ns in namespaces if running.get(ns, 0) >= limits.get(ns, unlimited)}
    open_namespaces = len(namespaces) - len(closed)
    assignments: list[Assignment] = []
    remaining: list[QueueEntry] = []
    free_count = free.count
    # the order is fixed now, before any run is served: what is left of it is the decision's
    in_order = fairness.walk(queue)
    walk = fairness.walk(queue, passing=closed) if closed else in_order
    for run in walk:
        if free_count == len(free.taken) or len(assignments) >= slots or live == 0 or \
                open_namespaces == 0:
            remaining.append(run)
            break
        demand = demands.get((run.selector, run.needs_gpu))
        if demand is None:
            demand = demands[(run.selector, run.needs_gpu)] = _Demand(
                run.selector, run.needs_gpu, free.candidates(run.selector, run.needs_gpu))
            demand.exhausted = demand.first_free(free.taken) is None
            live -= demand.exhausted
        if demand.exhausted or \
                running.get(run.namespace, 0) >= limits.get(run.namespace, unlimited):
            remaining.append(run)
            continue
        chosen = demand.pick(run.avoid, free.taken)
        live -= demand.exhausted
        if chosen is None:
            remaining.append(run)
            continue
        free.taken.add(chosen.name)
        running[run.namespace] = running.get(run.namespace, 0) + 1
        if running[run.namespace] == limits.get(run.namespace, unlimited):
            open_namespaces -= 1
        fairness.served(run, now)
        assignments.append(Assignment(run.key, chosen.name))
    # nothing more can start: the rest waits as it stands (all of it, or up to the head); the
    # runs passed over stand in it where they were
    if closed:
        given = {a.run for a in assignments}
        remaining, in_order = [], (r for r in in_order if r.key not in given)
    while head is None or len(remaining) < head:
        if (waiting := next(in_order, None)) is None:
            break
        remaining.append(waiting)
    return Decision(assignments, remaining if head is None else remaining[:head])


def queue_positions(order: Sequence[QueueEntry], limit: int = 50) -> dict[str, int]:
    """1-based positions of the first `limit` waiting runs."""
    return {run.key: i + 1 for i, run in enumerate(order[:limit])}
