"""One scheduling round: which waiting runs get which free boards (`schedule`), and the queue
positions of the runs still waiting.

Pure code over plain values so it can be benchmarked with a thousand simulated boards and tens of
thousands of queued runs (benchmarks/scheduler_bench.py). A run goes only to an available board
matching its selector; a namespace over its board limit waits.

A round walks the waiting runs in the fairness policy's order from the front, lazily, and stops as
soon as nothing more can start: no free board, no session slot, or no kind of run left that fits
a free board. Runs asking for the same thing share one pass over the shortest list of the board
index it names. So a round costs what it assigns plus the runs it passes that fit nothing free
(O(1) each), never a pass over the whole queue to order it, nor over all the boards to index
them. A namespace at its ceiling when the round starts is passed over whole, not run by run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from benchfarm.core.scheduling.boardindex import BoardIndex, BoardView, matches
from benchfarm.core.scheduling.fairness import FairnessPolicy, RoundRobinFairness
from benchfarm.core.scheduling.queue import QueueEntry, Selector, WaitingQueue


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
