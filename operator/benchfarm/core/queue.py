"""Who gets which board next: one global queue, fair across teams, never two runs on one board.

Pure code over plain values so it can be benchmarked with a thousand simulated boards and tens of
thousands of queued runs (benchmarks/scheduler_bench.py). Order: priority (higher first), then a
fairness policy among runs of equal priority (round-robin across namespaces by default, oldest
first within a namespace). A run goes only to an available board matching its selector; a
namespace over its board limit waits.
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


def schedule(runs: Sequence[QueuedRun], boards: Sequence[BoardView], *,
             running_per_namespace: Mapping[str, int] | None = None,
             max_boards: Mapping[str, int] | None = None,
             fairness: FairnessPolicy | None = None, now: float = 0.0) -> Decision:
    """One scheduling round: give available boards to the first runs that fit them."""
    fairness = fairness or RoundRobinFairness()
    order = fairness.order(runs)
    running = dict(running_per_namespace or {})
    limits = max_boards or {}
    free_by_type: dict[str, list[BoardView]] = defaultdict(list)
    for b in sorted(boards, key=lambda b: b.name):
        if b.available:
            free_by_type[b.device_type].append(b)
    taken: set[str] = set()
    assignments: list[Assignment] = []
    remaining: list[QueuedRun] = []
    free_count = sum(len(v) for v in free_by_type.values())
    for run in order:
        if free_count == len(taken):
            remaining.append(run)
            continue
        if running.get(run.namespace, 0) >= limits.get(run.namespace, 1 << 30):
            remaining.append(run)
            continue
        types = [run.selector.device_type] if run.selector.device_type else list(free_by_type)
        chosen = None
        for t in types:
            for b in free_by_type.get(t, ()):
                if b.name in taken or b.name in run.avoid or (run.needs_gpu and not b.gpu):
                    continue
                if matches(run.selector, b):
                    chosen = b
                    break
            if chosen:
                break
        if chosen is None:
            remaining.append(run)
            continue
        taken.add(chosen.name)
        running[run.namespace] = running.get(run.namespace, 0) + 1
        fairness.served(run, now)
        assignments.append(Assignment(run.key, chosen.name))
    return Decision(assignments, remaining)


def queue_positions(order: Sequence[QueuedRun], limit: int = 50) -> dict[str, int]:
    """1-based positions of the first `limit` waiting runs."""
    return {run.key: i + 1 for i, run in enumerate(order[:limit])}
