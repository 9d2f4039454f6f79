"""The operator's heap between scheduling rounds: Python's garbage collector tended so that its
full collections do not land inside a round (`HeapTender.tend`, called by the scheduler's
iteration after each round, on the owner's thread).
"""

from __future__ import annotations

import gc
import logging
import time

from benchfarm.operator.state import metrics

log = logging.getLogger("benchfarm")

TEND_EVERY = 2.0             # seconds between two collections and freezes
COLLECT_EVERY = 600.0        # seconds, at least, between two real full collections
HEAP_GROWTH = 64 * 2**20     # growth (bytes resident) that calls for a full collection


class HeapTender:
    def __init__(self) -> None:
        self.mark: int | None = None   # bytes resident after the last full collection
        self.tended_at = 0.0
        self.collected_at = 0.0

    def tend(self) -> None:
        """Python's full collections walk every object not frozen (seconds with 10,000 runs
        known on a loaded host), holding the GIL, in whichever thread triggers them, so in the
        middle of a round as often as not. Here, between rounds, every TEND_EVERY seconds: a
        collection of what is not frozen (what the last interval left) and then a freeze of what
        survived (`gc.freeze`: a list splice), so the full collections Python triggers itself
        walk only the objects of the last interval. (Tending at every watch event cost more
        than it saved.)

        A frozen object is still freed when its last reference goes; only cycles among frozen
        objects wait for a real full collection, which runs here only when the process has
        grown by HEAP_GROWTH since the last one (cyclic garbage piling up shows there; the live
        heap growing does too) and at most every COLLECT_EVERY seconds: at a steady heap none
        lands in a flood at all, and a heap growing fast is not collected back to back.

        Still paying with the owner thread: left out of a full `make bench-scale`, 11 of
        Python's 34 full collections fell inside a round, up to 515 ms each, and the worst
        round took 449 ms (benchmarks/RESULTS.md, "The tunings measured with the owner
        thread")."""
        now = time.monotonic()
        if now - self.tended_at < TEND_EVERY:
            return
        self.tended_at = now
        rss = metrics.rss_bytes()
        if self.mark is None:
            self.mark = rss
        elif rss - self.mark >= HEAP_GROWTH and now - self.collected_at >= COLLECT_EVERY:
            self.collected_at = now
            gc.unfreeze()
            found = gc.collect()
            self.mark = metrics.rss_bytes()
            log.info("full collection: %d unreachable object(s) in %.0f ms; %.0f MiB resident",
                     found, (time.monotonic() - now) * 1000, self.mark / 2**20)
        else:
            gc.collect()
        gc.freeze()
