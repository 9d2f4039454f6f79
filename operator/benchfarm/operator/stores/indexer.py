"""Every finished run into the results database, on a thread of its own: never a run's wait.

The operator sees each run finish (kopf's watch, and every run again when it starts); a run with
a metrics.json among its artifacts is handed to this indexer, which reads the document from the
store and upserts its rows (`benchfarm.history`). Nothing here is on kopf's loop or in a run's
path: while the database is down the runs simply wait in `pending` and are indexed, oldest first,
when it answers again (backoff up to 30 s), and an operator that starts indexes what finished
while none ran (runs already in the index are skipped: indexing is idempotent anyway).
After runs are indexed, the change points of their series are found again; one not reported before
that is a regression becomes a `ChangePoint` Warning event on the run it names (the first run after
the change; its message says so when the runs on either side were measured under other
conditions: a frequency cap, another governor, a hotter board) and counts in
`benchfarm_change_points_total`. A series is one namespace's (namespace,
metric, device type, plan): another namespace's runs never make, move or hide a change point, and
the run an event goes to is of the series' own namespace. The run's identity is the run object's:
its metrics.json must lie under `<namespace>/<name>/<uid>/` and name that run (else it is not
indexed, and the log says why).

The search for change points is seconds of CPU per series at thousands of runs (scipy's tests,
in Python), and a thread of the operator doing it held the GIL most of the time: the scheduler's
rounds and kopf's loop waited for it (rounds 5-10x their own CPU time at 90 finished runs a
minute). So it runs in a worker process of its own, at a low CPU priority, and once per
series for every run indexed meanwhile (at most every DETECT_EVERY seconds), not once per run.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Protocol

from benchfarm import cpu
from benchfarm.api.notifications import Event
from benchfarm.api.runs import BenchmarkRunStatus
from benchfarm.core.conditions import now_iso
from benchfarm.core.notifications.events import change_point_event
from benchfarm.core.policy.runkey import RunKey
from benchfarm.errors import InfraError, Outage, Party
from benchfarm.history.db import Database, Series
from benchfarm.history.index import index_run
from benchfarm.history.query import change_points_of
from benchfarm.kubeapi.client import API_FAILURES
from benchfarm.operator.state import metrics
from benchfarm.store.artifacts import ArtifactStore

log = logging.getLogger("benchfarm.history")
MAX_BACKOFF = 30.0
DOCUMENT = "/metrics.json"
DETECT_EVERY = 5.0       # seconds between two searches for change points (each: every series due)


def worker_start(operator: int) -> None:
    """The search worker's start: at a low priority, and gone with its operator. Operators
    killed outright (kill -9) left their workers orphaned and waiting on the pool's pipe: a CI
    run left five of them, 150 MB each. Which process kept the pipe open was not found (the
    session server is exec'd with its descriptors closed, so not it); the worker does not
    depend on that: it leaves as soon as its parent is no longer the operator.

    It leaves the operator's session too: where the kernel shares the CPU between sessions
    (`benchfarm.cpu`), the worker in the operator's would take the operator's share, which the
    embedded lab raises so that rounds do not wait for a CPU. In a group of its own it runs at
    `cpu.NO_BOARD_WAITS`, as a session past its board does: below every session on a board,
    not at 19, where a busy host starved it and the runs finished meanwhile waited to be indexed."""
    os.setsid()
    cpu.lower(cpu.NO_BOARD_WAITS)

    def watch() -> None:
        while os.getppid() == operator:
            time.sleep(1.0)
        os._exit(0)
    threading.Thread(target=watch, name="operator-watch", daemon=True).start()


class Events(Protocol):
    def event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None: ...


def document_key(status: dict[str, Any], bucket: str) -> str | None:
    """The key of a finished run's metrics.json, from its status.artifacts (None: it has none)."""
    for url in BenchmarkRunStatus.of(status).artifacts or []:
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
        self.due: dict[Series, None] = {}       # series with runs indexed since their last search
        self.detected_at = 0.0
        self.clock = time.monotonic
        self.worker: ProcessPoolExecutor | None = None
        # where a new change point is told (the runtime's notifier): Notifications' ChangePoint
        self.notify: Callable[[Event], None] = lambda event: None

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify()
        self.thread.join(timeout=5)
        if self.worker is not None:
            self.worker.shutdown(wait=False, cancel_futures=True)
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
                while not self.stopping and not self.pending and not self.due:
                    self.cond.wait()
                if self.stopping:
                    return
                if not self.pending:      # only searches are due: not before their time
                    wait = self.detected_at + DETECT_EVERY - self.clock()
                    if wait > 0:
                        self.cond.wait(wait)
                        continue
            try:
                self._step()
                backoff = 1.0
            except Outage as exc:
                log.warning("results database: %s; %d run(s) wait to be indexed (retry in "
                            "%.0f s)", exc, len(self.pending), backoff)
                with self.cond:
                    self.cond.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
            except Exception:                 # the loop's last handler
                metrics.bug(log, "results indexer")
                with self.cond:
                    self.cond.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    def _step(self) -> None:
        self.db.ensure_migrated()
        if self.done is None:
            done = self.db.indexed_uids()
            with self.cond:
                self.done = done
                for uid in [u for u in self.pending if u in done]:
                    del self.pending[uid]
        with self.cond:
            first = next(iter(self.pending.items()), None)
        if first is None:
            if self.due and self.clock() - self.detected_at >= DETECT_EVERY:
                self._change_points()
            return
        uid, (namespace, name, key) = first
        t0 = time.monotonic()
        try:
            rows = index_run(self.db, self.store, key, RunKey(namespace, name, uid))
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
            self.due.update(dict.fromkeys(self.db.run_series(uid)))

    def _search(self, series: list[Series]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """The series' change points now, found by the worker process (started at first use)."""
        if self.worker is None:
            self.worker = ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                initializer=worker_start, initargs=(os.getpid(),))
        try:
            found, outage = self.worker.submit(change_points_of, self.db.url, series).result()
        except BrokenProcessPool:     # it was killed: a new one at the next search
            self.worker = None
            raise
        if outage is not None:
            raise Outage(outage, party=Party.database)
        return found

    def _change_points(self) -> None:
        series = list(self.due)
        self.detected_at = self.clock()
        found = self._search(series)
        for s in series:
            self.due.pop(s, None)
        new = {(r["namespace"], r["metric"], r["device_type"], r["plan"], r["run_uid"])
               for r in self.db.record_points([row for row, _ in found])}
        for row, p in found:
            if (row["namespace"], row["metric"], row["device_type"], row["plan"],
                    row["run_uid"]) not in new or row["direction"] != "regression":
                continue
            namespace, name = p["run"].split("/", 1)
            if namespace != row["namespace"]:   # a series holds its own namespace's runs only
                log.error("change point of %s's series names %s: no event", row["namespace"],
                          p["run"])
                continue
            metrics.CHANGE_POINTS.labels(row["device_type"], row["plan"]).inc()
            message = (f"{row['metric']} on {row['device_type']} (plan {row['plan']}) regressed "
                       f"{p['magnitude']:+.2f} % (p {p['pvalue']:.2g}) from this run on: "
                       f"software {p['software'] or '?'}, board {p['board']}"
                       + (f"; {p['note']}" if p.get("note") else ""))
            log.warning("change point: %s/%s: %s", namespace, name, message)
            self.notify(change_point_event(
                namespace, name, p["uid"], {"metric": row["metric"],
                                            "deviceType": row["device_type"],
                                            "plan": row["plan"]}, now_iso(), message,
                {"magnitude": p["magnitude"], "pvalue": p["pvalue"],
                 "software": p["software"] or "", "board": p["board"]}))
            try:
                self.kube.event({"apiVersion": "benchfarm.io/v1alpha1", "kind": "BenchmarkRun",
                                 "metadata": {"namespace": namespace, "name": name,
                                              "uid": p["uid"]}},
                                "Warning", "ChangePoint", message)
            except API_FAILURES as exc:
                log.warning("%s: the ChangePoint event: %s", p["run"], exc)
