"""The registry's lock, watched: where its holder took it, how long it kept it, when it let go.

A round that waited for the lock cannot tell from its own thread whether another thread kept the
lock that long, or let go early and the round then waited for the GIL: a full bench's worst rounds
waited 50-80 ms "for the lock" with 1 ms of their own CPU, and no holder in the code keeps it
nearly that long. This lock notes the place in the code of each outermost hold (`holder`), the
moment it was let go (`released_at`: a waiter's wait splits there into the lock's part and the
GIL's) and says so when a hold lasts LONG_HOLD or more, with the holder's own CPU (a hold far
longer than its CPU was a holder waiting for the GIL or a CPU, not working).

It also lets the scheduling round go first (`first`). Each thread that asks for a held lock
queues for it, and each holder in turn must then get the GIL (up to 5 ms each on a busy host)
before its hold even starts: in a flood of watch events kopf's threads queue one after another
(a thousand Boards read back at a start, runs arriving), and a full bench's round waited 72-91 ms
behind them with no hold of 20 ms among them. While the round waits, a released lock is its
next, whoever queued before it; a thread that holds the lock already goes on."""
from __future__ import annotations

import logging
import sys
import threading
import time
from types import FrameType
from typing import Any

from . import metrics

log = logging.getLogger("benchfarm")

LONG_HOLD = 0.02        # seconds: a hold this long is logged and counted


class WatchedLock:
    """A re-entrant lock that notes its outermost holds, and lets one waiter go first."""

    def __init__(self, long_hold: float = LONG_HOLD) -> None:
        mutex = threading.Lock()
        self._turn = threading.Condition(mutex)     # those waiting their turn
        self._first = threading.Condition(mutex)    # the one waiting to go first
        self._urgent = False           # a thread waits to go first (only it sets this)
        self._owner: int | None = None  # the holder's thread
        self._depth = 0                # the holder's nesting (changed only by the holder)
        self.long_hold = long_hold
        self.holder = ""               # "function:line" of the current (or last) outermost hold
        self.previous = ""             # the one before it: whom a waiter waited for
        self.since = 0.0               # perf_counter() when the current hold began
        self._cpu_since = 0.0
        self.released_at = 0.0         # perf_counter() when the last hold ended

    def __enter__(self) -> WatchedLock:
        self._take(sys._getframe(1), urgent=False)
        return self

    def first(self) -> _First:
        """`with lock.first():` the lock as soon as its holder lets go, before any thread that
        waits for it (the scheduling round's: one thread at a time may ask so)."""
        return _First(self)

    def _take(self, caller: FrameType, urgent: bool) -> None:
        me = threading.get_ident()
        if self._owner == me:
            self._depth += 1
            return
        if urgent:
            # said before queueing for the mutex too: those ahead of it there see it
            self._urgent = True
            with self._turn:
                while self._owner is not None:
                    self._first.wait()
                self._owner, self._urgent = me, False
        else:
            with self._turn:
                while self._owner is not None or self._urgent:
                    self._turn.wait()
                self._owner = me
        self._depth = 1
        self.previous, self.holder = self.holder, \
            f"{caller.f_code.co_qualname}:{caller.f_lineno}"
        self.since, self._cpu_since = time.perf_counter(), time.thread_time()

    def __exit__(self, *exc: Any) -> None:
        self._depth -= 1
        if self._depth:
            return
        now = time.perf_counter()
        held, cpu, holder = now - self.since, time.thread_time() - self._cpu_since, self.holder
        self.released_at = now
        with self._turn:
            self._owner = None
            (self._first if self._urgent else self._turn).notify()
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


class _First:
    """The context of `WatchedLock.first`."""

    def __init__(self, lock: WatchedLock) -> None:
        self.lock = lock

    def __enter__(self) -> WatchedLock:
        self.lock._take(sys._getframe(1), urgent=True)
        return self.lock

    def __exit__(self, *exc: Any) -> None:
        self.lock.__exit__(*exc)
