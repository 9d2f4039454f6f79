"""The registry's lock, watched: where its holder took it, how long it kept it, when it let go.

A round that waited for the lock cannot tell from its own thread whether another thread kept the
lock that long, or let go early and the round then waited for the GIL: a full bench's worst rounds
waited 50-80 ms "for the lock" with 1 ms of their own CPU, and no holder in the code keeps it
nearly that long. This lock notes the place in the code of each outermost hold (`holder`), the
moment it was let go (`released_at`: a waiter's wait splits there into the lock's part and the
GIL's) and says so when a hold lasts LONG_HOLD or more, with the holder's own CPU (a hold far
longer than its CPU was a holder waiting for the GIL or a CPU, not working)."""
from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

from . import metrics

log = logging.getLogger("benchfarm")

LONG_HOLD = 0.02        # seconds: a hold this long is logged and counted


class WatchedLock:
    """A re-entrant lock (`threading.RLock`) that notes its outermost holds."""

    def __init__(self, long_hold: float = LONG_HOLD) -> None:
        self._lock = threading.RLock()
        self._depth = 0                # the holder's nesting (changed only by the holder)
        self.long_hold = long_hold
        self.holder = ""               # "function:line" of the current (or last) outermost hold
        self.previous = ""             # the one before it: whom a waiter waited for
        self.since = 0.0               # perf_counter() when the current hold began
        self._cpu_since = 0.0
        self.released_at = 0.0         # perf_counter() when the last hold ended

    def __enter__(self) -> WatchedLock:
        self._lock.acquire()
        self._depth += 1
        if self._depth == 1:
            code = sys._getframe(1)
            self.previous, self.holder = self.holder, \
                f"{code.f_code.co_qualname}:{code.f_lineno}"
            self.since, self._cpu_since = time.perf_counter(), time.thread_time()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._depth -= 1
        if self._depth:
            self._lock.release()
            return
        now = time.perf_counter()
        held, cpu, holder = now - self.since, time.thread_time() - self._cpu_since, self.holder
        self.released_at = now
        self._lock.release()
        if held >= self.long_hold:      # said after letting go: the log's I/O holds nobody up
            metrics.LOCK_LONG_HOLDS.labels(holder.split(":")[0]).inc()
            log.info("the registry's lock was held %.0f ms by %s (thread %s; its own CPU %.0f ms, "
                     "the rest waiting for the GIL or a CPU)", held * 1000, holder,
                     threading.current_thread().name, cpu * 1000)

    def waited(self, asked: float, got: float) -> tuple[float, float, str]:
        """Of a wait from `asked` to `got` (perf_counter, the caller holding the lock now): how
        long the lock was someone else's, how long the caller then waited for the GIL, and the
        holder it waited for ("" if the lock was free when asked)."""
        if self.released_at <= asked:
            return 0.0, got - asked, ""
        return self.released_at - asked, got - self.released_at, self.previous
