"""The operator's thread pools, whose tasks' bugs are heard.

A task handed to a plain `ThreadPoolExecutor` that raises keeps its exception in a future
nobody reads: a bug of a launch, a status write or a relay would vanish without a line. Each
task here expects its own failures (an outage, a refusal: caught by class where they happen);
what still escapes one is a bug, logged with its traceback and counted (`metrics.bug`), and the
pool's thread goes on with the next task.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from benchfarm.operator.state import metrics

log = logging.getLogger("benchfarm")
P = ParamSpec("P")
T = TypeVar("T")


class Workers(ThreadPoolExecutor):
    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        def task() -> T:
            try:
                return fn(*args, **kwargs)
            except Exception:
                metrics.bug(log, "%s on thread %s", getattr(fn, "__qualname__", fn),
                            threading.current_thread().name)
                raise
        return super().submit(task)
