"""The operator's heap between scheduling rounds: Python's garbage collector tended so that its
full collections do not land inside a round (`HeapTender.tend`, called by the scheduler's loop
after each round, on the scheduler's thread).
"""

from __future__ import annotations

import gc
import logging
import time

from . import metrics

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
        """Python's full collections walk every object not frozen: 2.5 s with 10,000 runs known
        on a loaded host, holding the GIL, in whichever thread triggers them (kopf's, parsing a
        watch event, as often as the scheduler's), so in the middle of a round or a launch as
        often as not. Here, between rounds, every TEND_EVERY seconds: a collection of what is
        not frozen (what the last interval left: tens of ms) and then a freeze of what survived
        (`gc.freeze`: a list splice), so the full collections Python triggers itself walk only
        the objects of the last interval (at 10 s, one of those took 165 ms inside a round of a
        flood). At every watch event (a flood iterates the loop at each) this took 8 % of the
        operator's time (py-spy).

        A frozen object is still freed when its last reference goes; only cycles among frozen
        objects wait for a real full collection, which runs here only when the process has
        grown by HEAP_GROWTH since the last one (cyclic garbage piling up shows there; the live
        heap growing does too) and at most every COLLECT_EVERY seconds: at a steady heap none
        lands in the flood at all, and a heap growing fast (the lab's operator deleting 10,000
        runs grew to 3.6 GB) is not collected back to back (2-7 s each)."""
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
