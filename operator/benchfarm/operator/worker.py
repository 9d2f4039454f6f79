"""One thread that reconciles objects by key, each at most once in its queue however many watch
events arrive: what the campaigns and the bisections do off kopf's loop.

`mark(key)` queues a key (a later mark of a queued key changes nothing); the thread takes them in
order and calls `reconcile(key)`. An outage (`InfraError`) tries that key again after
`RETRY_SECONDS` and goes on with the others; any other exception is a bug of benchfarm's, logged
and counted, and stops nothing else.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable

from benchfarm.errors import InfraError
from benchfarm.operator.state import metrics

RETRY_SECONDS = 5.0


class Worker:
    def __init__(self, name: str, reconcile: Callable[[str], None], log: logging.Logger) -> None:
        self.name, self._reconcile, self._log = name, reconcile, log
        self._dirty: OrderedDict[str, None] = OrderedDict()
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._work, name=f"benchfarm-{name}", daemon=True)
        self._thread.start()

    def mark(self, key: str) -> None:
        with self._cond:
            self._dirty[key] = None
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout=10)

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._dirty and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                key, _ = self._dirty.popitem(last=False)
            try:
                self._reconcile(key)
            except InfraError as exc:      # an outage: try this one again, go on with the others
                self._log.warning("%s %s: %s; trying again in %.0f s", self.name, key, exc,
                                  RETRY_SECONDS)
                threading.Timer(RETRY_SECONDS, self.mark, (key,)).start()
            except Exception:              # a bug must not stop every other object
                metrics.bug(self._log, f"{self.name} %s", key)
