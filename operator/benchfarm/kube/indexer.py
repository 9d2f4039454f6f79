"""Every finished run into the results database, on a thread of its own: never a run's wait.

The operator sees each run finish (kopf's watch, and every run again when it starts); a run with
a metrics.json among its artifacts is handed to this indexer, which reads the document from the
store and upserts its rows (`benchfarm.history`). Nothing here is on kopf's loop or in a run's
path: while the database is down the runs simply wait in `pending` and are indexed, oldest first,
when it answers again (backoff up to 30 s), and an operator that starts indexes what finished
while none ran (runs already in the index are skipped: indexing is idempotent anyway).
After a run is indexed, the change points of its series are found again; one not reported before
that is a regression becomes a `ChangePoint` Warning event on the run it names (the first run after
the change) and counts in `benchfarm_change_points_total`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Any, Protocol

from ..errors import InfraError, Outage
from ..history.db import Database
from ..history.index import index_run
from ..history.query import change_points
from ..store.artifacts import ArtifactStore
from . import metrics

log = logging.getLogger("benchfarm.history")
MAX_BACKOFF = 30.0
DOCUMENT = "/metrics.json"


class Events(Protocol):
    def event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None: ...


def document_key(status: dict[str, Any], bucket: str) -> str | None:
    """The key of a finished run's metrics.json, from its status.artifacts (None: it has none)."""
    for url in status.get("artifacts") or []:
        if isinstance(url, str) and url.startswith(f"s3://{bucket}/") and url.endswith(DOCUMENT):
            return url[len(f"s3://{bucket}/"):]
    return None


class Indexer:
    def __init__(self, db: Database, store: ArtifactStore, kube: Events) -> None:
        self.db = db
        self.store = store
        self.kube = kube
        self.pending: OrderedDict[str, tuple[str, str, str]] = OrderedDict()  # uid -> (ns, name, key)
        self.done: set[str] | None = None       # uids in the index (read once the DB answers)
        self.cond = threading.Condition()
        self.stopping = False
        self.thread = threading.Thread(target=self._loop, name="results-indexer", daemon=True)
        self.migrated = False

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify()
        self.thread.join(timeout=5)
        self.db.close()

    def finished(self, namespace: str, name: str, uid: str, status: dict[str, Any]) -> None:
        """A run that ended (any number of times: a known one is not indexed again)."""
        key = document_key(status, self.store.config.bucket)
        if key is None:
            return
        with self.cond:
            if (self.done is not None and uid in self.done) or uid in self.pending:
                return
            self.pending[uid] = (namespace, name, key)
            self.cond.notify()

    # -- the thread ---------------------------------------------------------------------------
    def _loop(self) -> None:
        backoff = 1.0
        while True:
            with self.cond:
                while not self.stopping and not self.pending:
                    self.cond.wait()
                if self.stopping:
                    return
            try:
                self._step()
                backoff = 1.0
            except Outage as exc:
                log.warning("results database: %s; %d run(s) wait to be indexed (retry in "
                            "%.0f s)", exc, len(self.pending), backoff)
                with self.cond:
                    self.cond.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
            except Exception:
                log.exception("results indexer")
                with self.cond:
                    self.cond.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    def _step(self) -> None:
        if not self.migrated:
            self.db.migrate()
            self.migrated = True
        if self.done is None:
            done = self.db.indexed_uids()
            with self.cond:
                self.done = done
                for uid in [u for u in self.pending if u in done]:
                    del self.pending[uid]
        with self.cond:
            if not self.pending:
                return
            uid, (namespace, name, key) = next(iter(self.pending.items()))
        t0 = time.monotonic()
        try:
            rows = index_run(self.db, self.store, key)
        except Outage:
            raise
        except (InfraError, ValueError) as exc:   # no such document, or not one: nothing to index
            log.warning("%s/%s: not indexed: %s", namespace, name, exc)
            rows = 0
        with self.cond:
            self.pending.pop(uid, None)
            assert self.done is not None
            self.done.add(uid)
        metrics.INDEXED.inc()
        log.info("%s/%s: %d result rows indexed in %.2f s", namespace, name, rows,
                 time.monotonic() - t0)
        if rows:
            self._change_points(uid)

    def _change_points(self, uid: str) -> None:
        found = [pair for series in self.db.run_series(uid)
                 for pair in change_points(self.db, *series)]
        new = {(r["metric"], r["device_type"], r["plan"], r["run_uid"])
               for r in self.db.record_points([row for row, _ in found])}
        for row, p in found:
            if (row["metric"], row["device_type"], row["plan"], row["run_uid"]) not in new or \
                    row["direction"] != "regression":
                continue
            namespace, name = p["run"].split("/", 1)
            metrics.CHANGE_POINTS.labels(row["device_type"], row["plan"], row["metric"]).inc()
            message = (f"{row['metric']} on {row['device_type']} (plan {row['plan']}) regressed "
                       f"{p['magnitude']:+.2f} % (p {p['pvalue']:.2g}) from this run on: "
                       f"software {p['software'] or '?'}, board {p['board']}")
            log.warning("change point: %s/%s: %s", namespace, name, message)
            try:
                self.kube.event({"apiVersion": "benchfarm.io/v1alpha1", "kind": "BenchmarkRun",
                                 "metadata": {"namespace": namespace, "name": name,
                                              "uid": p["uid"]}},
                                "Warning", "ChangePoint", message)
            except Exception:
                log.exception("%s: the ChangePoint event", p["run"])
