"""Who gets which board next: one global queue, fair across teams, never two runs on one board.

Pure code over plain values so it can be benchmarked with a thousand simulated boards and tens of
thousands of queued runs (benchmarks/scheduler_bench.py). Order: priority (higher first), then a
fairness policy among runs of equal priority (round-robin across namespaces by default, oldest
first within a namespace). A run goes only to an available board matching its selector; a
namespace over its board limit waits.

A round costs O(runs + boards) beyond ordering the queue, plus one pass per distinct selector
over the shortest index list it names: free boards are indexed by board, device type, label and
GPU, and runs asking for the same thing share that pass. A run that fits no free board costs O(1);
a run with boards to avoid, one step more per avoided board it passes.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class QueuedRun:
    key: str                      # "<namespace>/<name>"
    namespace: str
    priority: int
    created: float                # seconds; older runs first at equal priority
    selector: Selector
    avoid: frozenset[str] = frozenset()   # boards this run already failed on
    needs_gpu: bool = False


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


class FairnessPolicy(Protocol):
    def order(self, runs: Sequence[QueuedRun]) -> list[QueuedRun]: ...

    def served(self, run: QueuedRun, now: float) -> None: ...


class RoundRobinFairness:
    """At equal priority, namespaces take turns; the one served longest ago goes first."""

    def __init__(self) -> None:
        self.last_served: dict[str, float] = {}

    def served(self, run: QueuedRun, now: float) -> None:
        self.last_served[run.namespace] = now

    def order(self, runs: Sequence[QueuedRun]) -> list[QueuedRun]:
        by_priority: dict[int, dict[str, list[QueuedRun]]] = defaultdict(lambda: defaultdict(list))
        for run in runs:
            by_priority[run.priority][run.namespace].append(run)
        out: list[QueuedRun] = []
        for priority in sorted(by_priority, reverse=True):
            per_ns = by_priority[priority]
            queues = {ns: deque(sorted(rs, key=lambda r: (r.created, r.key)))
                      for ns, rs in per_ns.items()}
            turn = sorted(queues, key=lambda ns: (self.last_served.get(ns, float("-inf")),
                                                  queues[ns][0].created, ns))
            while turn:
                next_turn = []
                for ns in turn:
                    out.append(queues[ns].popleft())
                    if queues[ns]:
                        next_turn.append(ns)
                turn = next_turn
        return out


class StrictOrder:
    """Priority then age, ignoring namespaces (for labs that want plain FIFO)."""

    def served(self, run: QueuedRun, now: float) -> None:
        return None

    def order(self, runs: Sequence[QueuedRun]) -> list[QueuedRun]:
        return sorted(runs, key=lambda r: (-r.priority, r.created, r.key))


@dataclass(frozen=True)
class Assignment:
    run: str
    board: str


@dataclass
class Decision:
    assignments: list[Assignment]
    order: list[QueuedRun]        # the queue as it stands after this round (assigned runs removed)


class _FreeBoards:
    """The round's available boards in the order a run tries them, indexed by what selectors name.

    A run naming a device type tries that type's boards by name; a run naming none tries the
    types one after another (in the order of each type's first board by name), each by name.
    Every index list keeps that order.
    """

    def __init__(self, boards: Sequence[BoardView]) -> None:
        self.by_type: dict[str, list[BoardView]] = defaultdict(list)
        for b in sorted(boards, key=lambda b: b.name):
            if b.available:
                self.by_type[b.device_type].append(b)
        self.ordered = [b for of_type in self.by_type.values() for b in of_type]
        self.by_name: dict[str, list[BoardView]] = defaultdict(list)
        self.by_label: dict[tuple[str, str], list[BoardView]] = defaultdict(list)
        self.with_gpu: list[BoardView] = []
        for b in self.ordered:
            self.by_name[b.name].append(b)
            for pair in b.labels.items():
                self.by_label[pair].append(b)
            if b.gpu:
                self.with_gpu.append(b)
        self.taken: set[str] = set()

    def candidates(self, selector: Selector, needs_gpu: bool) -> list[BoardView]:
        """The shortest index list holding every free board that could fit (a superset)."""
        lists = [self.ordered]
        if selector.board is not None:
            lists.append(self.by_name.get(selector.board, []))
        if selector.device_type is not None:
            lists.append(self.by_type.get(selector.device_type, []))
        lists.extend(self.by_label.get(pair, []) for pair in selector.labels)
        if needs_gpu:
            lists.append(self.with_gpu)
        return min(lists, key=len)


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

    def pick(self, avoid: frozenset[str], taken: set[str]) -> BoardView | None:
        i = self._free_from(0, taken)
        self.exhausted = i == len(self.fits)
        while i < len(self.fits) and self.fits[i].name in avoid:
            i = self._free_from(i + 1, taken)
        return self.fits[i] if i < len(self.fits) else None


def schedule(runs: Sequence[QueuedRun], boards: Sequence[BoardView], *,
             running_per_namespace: Mapping[str, int] | None = None,
             max_boards: Mapping[str, int] | None = None,
             fairness: FairnessPolicy | None = None, now: float = 0.0,
             max_assignments: int | None = None) -> Decision:
    """One scheduling round: give available boards to the first runs that fit them.

    `max_assignments` is how many sessions can start right now (the launcher's free slots): a
    board is given only to a run whose session starts at once, never marked Busy to wait."""
    fairness = fairness or RoundRobinFairness()
    order = fairness.order(runs)
    running = dict(running_per_namespace or {})
    limits = max_boards or {}
    free = _FreeBoards(boards)
    demands: dict[tuple[Selector, bool], _Demand] = {}
    assignments: list[Assignment] = []
    remaining: list[QueuedRun] = []
    free_count = len(free.ordered)
    slots = (1 << 30) if max_assignments is None else max(0, max_assignments)
    for run in order:
        if free_count == len(free.taken) or len(assignments) >= slots or \
                running.get(run.namespace, 0) >= limits.get(run.namespace, 1 << 30):
            remaining.append(run)
            continue
        demand = demands.get((run.selector, run.needs_gpu))
        if demand is None:
            demand = demands[(run.selector, run.needs_gpu)] = _Demand(
                run.selector, run.needs_gpu, free.candidates(run.selector, run.needs_gpu))
        chosen = None if demand.exhausted else demand.pick(run.avoid, free.taken)
        if chosen is None:
            remaining.append(run)
            continue
        free.taken.add(chosen.name)
        running[run.namespace] = running.get(run.namespace, 0) + 1
        fairness.served(run, now)
        assignments.append(Assignment(run.key, chosen.name))
    return Decision(assignments, remaining)


def queue_positions(order: Sequence[QueuedRun], limit: int = 50) -> dict[str, int]:
    """1-based positions of the first `limit` waiting runs."""
    return {run.key: i + 1 for i, run in enumerate(order[:limit])}
