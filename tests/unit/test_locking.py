"""The registry's watched lock (`kube.locking`): it names the place in the code of each outermost
hold, splits a waiter's wait into the lock's part and the GIL's, and reports long holds."""

from __future__ import annotations

import logging
import threading
import time

from benchfarm.kube import metrics
from benchfarm.kube.locking import WatchedLock


def outer(lock: WatchedLock) -> str:
    with lock:
        with lock:                     # re-entrant: the outermost hold is the one named
            return lock.holder


def test_the_outermost_hold_is_named_by_its_function_and_line() -> None:
    lock = WatchedLock()
    holder = outer(lock)
    assert holder.startswith("outer:")
    assert int(holder.split(":")[1]) > 0
    with lock:
        assert lock.previous == holder     # whom a waiter of this hold waited for
        assert lock.holder.startswith("test_the_outermost_hold_is_named")


def test_a_wait_for_a_free_lock_is_all_gil() -> None:
    lock = WatchedLock()
    asked = time.perf_counter()
    with lock:
        got = time.perf_counter()
        held, gil, holder = lock.waited(asked, got)
    assert (held, holder) == (0.0, "")
    assert gil == got - asked


def hold_for(lock: WatchedLock, taken: threading.Event, seconds: float) -> None:
    with lock:
        taken.set()
        time.sleep(seconds)


def test_a_wait_behind_another_thread_names_it_and_splits_at_its_release() -> None:
    lock = WatchedLock()
    taken = threading.Event()
    other = threading.Thread(target=hold_for, args=(lock, taken, 0.1))
    other.start()
    taken.wait()
    asked = time.perf_counter()
    with lock:
        got = time.perf_counter()
        held, gil, holder = lock.waited(asked, got)
    other.join()
    assert holder.startswith("hold_for:")
    assert 0.05 < held <= got - asked
    assert 0.0 <= gil < 0.05
    assert abs(held + gil - (got - asked)) < 1e-9


def test_a_long_hold_is_logged_and_counted_with_its_cpu(caplog) -> None:
    lock = WatchedLock(long_hold=0.03)
    before = metrics.REGISTRY.get_sample_value("benchfarm_lock_long_holds_total",
                                               {"holder": "hold_for"}) or 0.0
    with caplog.at_level(logging.INFO, logger="benchfarm"):
        hold_for(lock, threading.Event(), 0.05)          # sleeping: no CPU of its own
        outer(lock)                                       # short: not reported
    lines = [r.getMessage() for r in caplog.records if "registry's lock" in r.getMessage()]
    assert len(lines) == 1
    assert "by hold_for:" in lines[0] and "its own CPU 0 ms" in lines[0]
    after = metrics.REGISTRY.get_sample_value("benchfarm_lock_long_holds_total",
                                              {"holder": "hold_for"})
    assert after == before + 1
