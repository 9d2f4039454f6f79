"""Where the history page's series come from: a `HistorySource`, in the shape `benchfarm history
--format json` prints (one run's mean and samples per point, change points naming a run).

The results database (benchfarm.history, `DatabaseHistorySource`: the default where
BENCHFARM_DATABASE_URL is set) is one source; `StoreHistorySource` is the other, read
straight from the finished runs' metrics.json in the artifact store (the record), without change
points: a lab without the database still charts its runs. `benchfarm web --history-source
MODULE:FACTORY` names another (a factory called with the Kube client and the ArtifactStore).
A series is one namespace's (`SeriesKey.namespace`): a source answers the series of the
namespaces it is asked for (None: every one, a lab admin's view) and a series' points and change
points from that namespace's runs only, so another namespace's runs never show in a person's
menus or move their change points. Whatever the source, a person is also shown only the points
and change points of runs they may read (`visible`).
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

from benchfarm.api.outcomes import Phase
from benchfarm.core.statistics.measured import counted_series
from benchfarm.core.statistics.results import samples_from_document
from benchfarm.kubeapi.client import Kube
from benchfarm.store.artifacts import ArtifactStore, run_prefix
from benchfarm.web.views import SeriesKey

__all__ = ["DatabaseHistorySource", "HistorySource", "SeriesKey", "StoreHistorySource",
           "load_source", "visible"]

LIST_TTL = 5.0      # seconds the store source's view of the finished runs is reused
# what the store source holds of the runs' documents: the newest runs' points up to these
MAX_RUNS = 5000
MAX_BYTES = 64 * 1024 * 1024
log = logging.getLogger("benchfarm.web")

Points = list[tuple[SeriesKey, dict[str, Any]]]


class HistorySource(Protocol):
    def series_keys(self, namespaces: frozenset[str] | None) -> list[SeriesKey]:
        """Every (namespace, metric, device type, plan) of `namespaces` (None: of every
        namespace) that has at least one run."""
        ...

    def history(self, namespace: str, metric: str, device_type: str, plan: str,
                with_points: bool = True) -> dict[str, Any]:
        """`namespace`'s runs only: {"series": [{"run", "time", "software", "board", "mean",
        "samples"}], oldest first,
        "changePoints": [{"run", "software", "magnitude", "pvalue", "direction"}]} (the change
        points may be left out when not `with_points`: the compare view needs none)"""
        ...


def visible(doc: dict[str, Any], may_read: Callable[[str], bool]) -> dict[str, Any]:
    """The history without the runs of namespaces the person may not read."""
    def ok(item: dict[str, Any]) -> bool:
        return may_read(str(item.get("run", "")).split("/", 1)[0])
    return {"series": [p for p in doc.get("series", []) if ok(p)],
            "changePoints": [c for c in doc.get("changePoints", []) if ok(c)]}


class StoreHistorySource:
    """Series from the finished runs' metrics.json (each document read once per run uid, the
    list of runs at most every LIST_TTL seconds). It holds the points of the newest runs only,
    at most MAX_RUNS of them and MAX_BYTES (estimated, `points_bytes`): a run's figures are
    the tenant's (up to maxMetricsPerRun of them), and the runs of a lab without the results
    database are many; older runs are left out of the charts (said in the log), as is one run
    whose points alone would take a quarter of MAX_BYTES, and a deleted run's points go with
    it."""

    def __init__(self, kube: Kube, store: ArtifactStore, max_runs: int = MAX_RUNS,
                 max_bytes: int = MAX_BYTES) -> None:
        self.kube, self.store = kube, store
        self.max_runs, self.max_bytes = max_runs, max_bytes
        # run uid -> (its points, their estimated bytes); only the runs of the last listing
        self._docs: OrderedDict[str, tuple[Points, int]] = OrderedDict()
        self._listed: tuple[float, Points] = (-LIST_TTL, [])
        self._lock = threading.Lock()

    def _points(self) -> Points:
        now = time.monotonic()
        with self._lock:
            if now - self._listed[0] < LIST_TTL:    # a page asks for several series at once
                return self._listed[1]
        runs = [r for r in self.kube.list_runs()
                if (r.get("status") or {}).get("phase") == Phase.succeeded]
        runs.sort(key=lambda r: (r["status"].get("completionTime") or "",
                                 r["metadata"]["uid"]), reverse=True)     # newest first
        kept: OrderedDict[str, tuple[Points, int]] = OrderedDict()
        total, left_out = 0, 0
        for run in runs:
            uid = run["metadata"]["uid"]
            with self._lock:
                known = self._docs.get(uid)
            if known is None:
                points = self._read(run)
                size = points_bytes(points)
                if size > self.max_bytes // 4:      # one run would crowd out the rest
                    log.warning("history from the store: run %s/%s left out: its points take "
                                "%d MiB", run["metadata"]["namespace"], run["metadata"]["name"],
                                size >> 20)
                    points, size = [], 0
                known = (points, size)
            if len(kept) >= self.max_runs or total + known[1] > self.max_bytes:
                left_out = len(runs) - len(kept)
                break
            kept[uid] = known
            total += known[1]
        if left_out:
            log.warning("history from the store: the %d newest runs' points (%d MiB) are shown, "
                        "%d older runs are left out", len(kept), total >> 20, left_out)
        out = [point for points, _ in kept.values() for point in points]
        with self._lock:
            self._docs = kept
            self._listed = (now, out)
        return out

    def software_of(self, run: dict[str, Any]) -> str:
        """The build a run booted: its software set's name ("" for the board's own image)."""
        return str(((run.get("spec") or {}).get("software") or {}).get("name") or "")

    def _read(self, run: dict[str, Any]) -> Points:
        meta, spec, st = run["metadata"], run.get("spec") or {}, run.get("status") or {}
        ns, name = meta["namespace"], meta["name"]
        key = f"{run_prefix(ns, name, meta['uid'], spec.get('artifactPrefix', ''))}/metrics.json"
        doc = self.store.get_document(key)
        if doc is None:
            return []
        samples, _ = samples_from_document(counted_series(doc))    # counted iterations only
        device_type = (spec.get("selector") or {}).get("deviceType") or \
            (doc.get("run") or {}).get("deviceType") or ""
        out = []
        for metric, sample in samples.items():
            values = list(sample.values)
            if not values:
                continue
            out.append((SeriesKey(ns, metric, device_type, spec.get("plan") or ""), {
                "run": f"{ns}/{name}", "time": st.get("completionTime"),
                "software": self.software_of(run), "board": st.get("board") or "", "mean": sum(values) / len(values),
                "samples": values}))
        return out

    def series_keys(self, namespaces: frozenset[str] | None) -> list[SeriesKey]:
        return sorted({k for k, _ in self._points()
                       if namespaces is None or k.namespace in namespaces})

    def history(self, namespace: str, metric: str, device_type: str, plan: str,
                with_points: bool = True) -> dict[str, Any]:
        want = SeriesKey(namespace, metric, device_type, plan)
        series = sorted((p for k, p in self._points() if k == want),
                        key=lambda p: (p["time"] or "", p["run"]))
        return {"series": series, "changePoints": []}


def points_bytes(points: Points) -> int:
    """About what a run's points take in memory: a fixed part per point and its strings, and
    each sample (a float in a list)."""
    return sum(400 + len(key.metric) + len(p["run"]) + len(p["software"]) + len(p["board"])
               + 32 * len(p["samples"]) for key, p in points)


class DatabaseHistorySource:
    """The results database's series, with their change points (benchfarm.history): what
    `benchfarm history --format json` prints. SQLAlchemy loads on the first page that asks."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._db: Any = None

    def _database(self) -> Any:
        if self._db is None:
            from benchfarm.history import Database
            self._db = Database(self.url)
        return self._db

    def series_keys(self, namespaces: frozenset[str] | None) -> list[SeriesKey]:
        return sorted(SeriesKey(*k) for k in self._database().series_keys(namespaces))

    def history(self, namespace: str, metric: str, device_type: str, plan: str,
                with_points: bool = True) -> dict[str, Any]:
        from benchfarm.history import history
        doc: dict[str, Any] = history(self._database(), namespace, metric, device_type, plan,
                                      with_points=with_points)
        return doc


def load_source(spec: str | None, kube: Kube, store: ArtifactStore, *,
                database_url: str = "") -> HistorySource:
    """`MODULE:FACTORY` called with (kube, store); else the results database when the lab has
    one (BENCHFARM_DATABASE_URL), else the store's own series."""
    if not spec:
        return DatabaseHistorySource(database_url) if database_url else \
            StoreHistorySource(kube, store)
    module, _, attr = spec.partition(":")
    factory = getattr(importlib.import_module(module), attr)
    source: HistorySource = factory(kube, store)
    return source
