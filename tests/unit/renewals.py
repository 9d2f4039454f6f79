"""A stand-in for a session's Lease thread in the budget tests: it ticks every 0.1 s while a
budgeted call runs, so a test can show the call left the GIL free (the thread ran on)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

EVERY = 0.1


@dataclass
class Renewals:
    ticks: list[float] = field(default_factory=list)
    took: float = 0.0


@contextmanager
def renewing() -> Iterator[Renewals]:
    """Ticks every EVERY seconds in a thread of its own while the body runs; `took` is how long
    the body took (also when it raised)."""
    seen = Renewals()
    done = threading.Event()

    def renewals() -> None:
        while not done.is_set():
            seen.ticks.append(time.monotonic())
            time.sleep(EVERY)

    threading.Thread(target=renewals, daemon=True).start()
    t = time.monotonic()
    try:
        yield seen
    finally:
        seen.took = time.monotonic() - t
        done.set()
