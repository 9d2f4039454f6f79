"""In what order the waiting runs get boards: the fairness policies among runs of equal priority.

Order: priority (higher first), then a fairness policy among runs of equal priority (round-robin
across namespaces by default, oldest first within a namespace; or plain age, `StrictOrder`). A
policy walks the `WaitingQueue` lazily, from the front: a round reads only as far as it needs.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Protocol

from benchfarm.core.scheduling.queue import QueueEntry, WaitingQueue


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
