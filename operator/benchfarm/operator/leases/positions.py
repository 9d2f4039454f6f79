"""The queue as a person sees it: each waiting BoardLease's `status.queuePosition` in the one
queue and its `status.estimatedStart`, when a board it fits should be free (the boards' ends: a
lease's expiry, a run's timeout). Written every POSITIONS_EVERY s at most, after a round on the
scheduler's thread, and only where it changed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from benchfarm.core.scheduling import queue as q
from benchfarm.core.scheduling.boardindex import BoardView, matches
from benchfarm.operator.leases.book import LeaseBook, LeaseRuntime, iso

POSITIONS_EVERY = 5.0     # seconds between two writes of the waiting leases' positions


class LeasePositions:
    def __init__(self, rt: LeaseRuntime, book: LeaseBook,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rt = rt
        self.book = book
        self.clock = clock
        self.positions: dict[str, tuple[int | None, str | None]] = {}
        self.positions_at = 0.0

    def forget(self, key: str) -> None:
        """The lease waits no more (granted): its position as last written is forgotten."""
        self.positions.pop(key, None)

    def update(self, now: float) -> None:
        """Every POSITIONS_EVERY s: each waiting lease's position in the one queue and when a
        board it fits should be free (the boards' ends: a lease's expiry, a run's timeout). On
        the owner's thread, after a round."""
        if self.clock() - self.positions_at < POSITIONS_EVERY:
            return
        self.positions_at = self.clock()
        leases = self.book.leases
        waiting = {k for k, lease in leases.items() if lease.waiting}
        if not waiting:
            return
        found: dict[str, int] = {}
        for i, entry in enumerate(self._walk()):
            if entry.key in waiting:
                found[entry.key] = i + 1
                if len(found) == len(waiting):
                    break
        selectors = {k: self.book.entry(leases[k]).selector for k in found}
        boards = list(self.rt.inventory.boards.values())
        for key, position in found.items():
            ends = sorted(t for b in boards if b.device_type and
                          matches(selectors[key], BoardView(b.name, b.device_type, b.labels))
                          and (t := self.rt.board_free_at(b.name, now)) is not None)
            start = iso(max(now, ends[min(position, len(ends)) - 1])) if ends else None
            if self.positions.get(key) == (position, start):
                continue
            lease = leases.get(key)
            if lease is None or not lease.waiting:
                continue
            self.positions[key] = (position, start)
            self.book.write(lease.namespace, lease.name,
                            {"queuePosition": position, "estimatedStart": start})

    def _walk(self) -> Iterator[q.QueueEntry]:
        return self.rt.fairness.walk(self.rt.index.queue)
