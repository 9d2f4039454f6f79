"""The one thread that owns the lab's state: runs, boards, leases and seats as the operator knows
them. Every other thread asks it by message.

kopf's handlers post what they saw (`post`: they never wait). A launch, a status write or a lease
grant runs on a thread of its own because it waits for the API server; when it has its answer it
hands the change to the owner (`call`: the caller waits until the owner has made it, and gets
what the owner returns). The owner serves its inbox in order, and between two batches of
messages runs its own work (`serve`'s `tick`: the scheduler's refresh and round). So no lock
guards the records. Two changes never interleave, and a round never waits for a thread holding
a lock. Why a thread and not an asyncio task on kopf's loop: a round and the inventory's refresh
are CPU and blocking coordinator calls, which would stall kopf's loop and every handler on it.

`check_write` is what the records (`operator.state.records`) call on every change. A change made by
another thread once the owner runs is a bug. It is logged with its stack and counted
(`benchfarm_off_owner_writes_total`, and as an operator bug); the stack tests read that count
and fail if it is not 0.
Before `start`, and in unit tests that build the parts without an owner thread, every thread
may write: `call` and `post` then run at once, on the caller's thread.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, ParamSpec, TypeVar

from benchfarm.operator.state import metrics

log = logging.getLogger("benchfarm")

P = ParamSpec("P")
T = TypeVar("T")

BATCH = 256     # messages served before the owner's own work gets its turn again

_ident: int | None = None       # the owner thread's, once it runs (one owner per process)
_reported: set[str] = set()     # the places already logged (each once: the count says the rest)


def check_write(what: str) -> None:
    """A record of the lab's state is about to change (`what`: its kind): the owner's thread
    or, before there is one, any. Otherwise the change is made and reported as a bug."""
    if _ident is None or threading.get_ident() == _ident:
        return
    metrics.OFF_OWNER_WRITES.labels(what).inc()
    metrics.BUGS.inc()                  # the chart's BenchfarmOperatorBug alert
    if what not in _reported:
        _reported.add(what)
        log.error("a %s record was changed by thread %s, not by the lab's owner thread "
                  "(a bug)", what, threading.current_thread().name, stack_info=True)


_Message = tuple[Callable[..., Any], tuple[Any, ...], "Future[Any] | None"]


class Owner:
    """The owner thread, its inbox, and how other threads reach it."""

    def __init__(self, name: str = "owner") -> None:
        self.name = name
        self.inbox: queue.SimpleQueue[_Message | None] = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self.ident: int | None = None
        self.served = 0          # messages served (tests and the metrics read it)

    # -- what other threads do ----------------------------------------------------------------
    def mine(self) -> bool:
        """True on the owner's thread, and on any thread before it runs."""
        return self.ident is None or threading.get_ident() == self.ident

    def post(self, fn: Callable[P, Any], *args: P.args, **kwargs: P.kwargs) -> None:
        """`fn(*args)` on the owner's thread, later; the caller goes on at once."""
        if self.ident is None:
            fn(*args, **kwargs)
            return
        self.inbox.put((_bind(fn, args, kwargs), (), None))

    def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(*args)` on the owner's thread; the caller waits for what it returns (or raises).
        On the owner's own thread (or before it runs) it runs at once."""
        if self.mine():
            return fn(*args, **kwargs)
        done: Future[T] = Future()
        self.inbox.put((_bind(fn, args, kwargs), (), done))
        return done.result()

    # -- the owner's thread -------------------------------------------------------------------
    def start(self, tick: Callable[[], None], due: Callable[[], float],
              first: Callable[[], None] = lambda: None) -> None:
        """The owner's thread: it runs `first`, then serves the inbox and, between batches,
        runs `tick` (the scheduler's iteration, which decides itself whether it has work); it
        waits at most `due()` seconds for a message. Once: a start tried again (the lab was not
        up yet) keeps the thread it has."""
        if self.alive():
            return
        started = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(tick, due, first, started),
                                       name=self.name, daemon=True)
        self.thread.start()
        started.wait()

    def stop(self, timeout: float = 30.0) -> None:
        """After what is in the inbox now has been served (its own step ends first). From
        then on `call` and `post` run on the caller's thread again."""
        if self.thread is None:
            return
        self.inbox.put(None)
        self.thread.join(timeout)

    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def _serve(self, tick: Callable[[], None], due: Callable[[], float],
               first: Callable[[], None], started: threading.Event) -> None:
        global _ident
        self.ident = _ident = threading.get_ident()
        started.set()
        first()
        try:
            self._loop(tick, due)
        finally:
            while True:     # what came with or after the stop: served here, nobody waits forever
                try:
                    message = self.inbox.get_nowait()
                except queue.Empty:
                    break
                if message is not None:
                    self._handle(message)
            self.ident = _ident = None

    def _loop(self, tick: Callable[[], None], due: Callable[[], float]) -> None:
        while True:
            message: _Message | None | bool
            try:
                message = self.inbox.get(timeout=max(0.0, due()))
            except queue.Empty:
                message = False         # nothing came: the tick is due
            served = 0
            while isinstance(message, tuple):
                self._handle(message)
                served += 1
                if served >= BATCH:
                    break
                try:
                    message = self.inbox.get_nowait()
                except queue.Empty:
                    break
            if message is None:
                return
            metrics.OWNER_INBOX.set(self.inbox.qsize())
            t0 = time.monotonic()
            try:
                tick()
            except Exception:            # the owner must not die: the next tick tries again
                metrics.bug(log, "the owner's iteration failed; again at the next one")
                time.sleep(min(1.0, max(0.0, 1.0 - (time.monotonic() - t0))))

    def _handle(self, message: _Message) -> None:
        fn, args, done = message
        self.served += 1
        if done is None:
            try:
                fn(*args)
            except Exception:           # a posted event's handler: a bug, the owner goes on
                metrics.bug(log, "a message to the owner failed: %s", getattr(fn, "__name__", fn))
            return
        if not done.set_running_or_notify_cancel():
            return
        try:
            done.set_result(fn(*args))
        except BaseException as exc:    # the caller's to handle, as if it had called fn itself
            done.set_exception(exc)


def _bind(fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], T]:
    if not args and not kwargs:
        return fn
    return lambda: fn(*args, **kwargs)
