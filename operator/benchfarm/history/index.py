"""A finished run's metrics.json (the record, in the store) as rows of the results database.

`rows` is the pure part: which metrics a document has and their direction come from
`core.results.samples_from_document` (the one definition reports and comparisons use), the run's
identity from the document's `run` (and its provenance). `index_run` reads one run's document and
upserts it; `reindex` rebuilds the index from every metrics.json in the store (and takes the
change points it then finds as reported: a rebuilt index raises no events).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any

from ..core.results import samples_from_document
from ..errors import InfraError
from ..store.artifacts import ArtifactStore
from .db import Database
from .query import change_points

log = logging.getLogger("benchfarm.history")
DOCUMENT = "metrics.json"


def _time(value: Any, fallback: dt.datetime | None) -> dt.datetime:
    if isinstance(value, str) and value:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return fallback or dt.datetime.now(dt.UTC)


def _side_rows(run: dict[str, Any], doc: dict[str, Any], side: str, software: dict[str, Any],
               when: dt.datetime) -> list[dict[str, Any]]:
    provenance = doc.get("provenance") or {}
    samples, direction = samples_from_document(doc)
    identity = {
        "run_uid": run["uid"], "side": side, "namespace": run["namespace"], "name": run["name"],
        "plan": run.get("plan") or "(inline)", "plan_digest": provenance.get("planDigest"),
        "device_type": run.get("deviceType") or "", "board": run.get("board") or "",
        "software": software.get("name") or "", "software_digests": software.get("digests") or {},
        "kernel_release": provenance.get("kernelRelease"), "labels": run.get("labels") or {},
        "time": when,
    }
    out = []
    for key, sample in samples.items():
        values = [float(v) for v in sample.values]
        if not values:
            continue
        metric, _, unit = key.rpartition(" (")
        out.append({**identity, "metric": metric, "unit": unit.rstrip(")"),
                    "higher_is_better": direction[key], "samples": values,
                    "mean": sum(values) / len(values), "n": len(values)})
    return out


def rows(doc: dict[str, Any], modified: dt.datetime | None = None) -> list[dict[str, Any]]:
    """The rows of one metrics.json: per side of an A/B run, or the run's own."""
    run = doc.get("run") or {}
    if not run.get("uid"):
        return []
    when = _time(run.get("finishedAt"), modified)
    software = run.get("softwareSets") or {}
    if doc.get("sides"):
        return [r for label, side_doc in doc["sides"].items()
                for r in _side_rows(run, side_doc, label, software.get(label) or {"name": label},
                                    when)]
    return _side_rows(run, doc, "", next(iter(software.values()), {}), when)


def document_key(store: ArtifactStore, namespace: str, name: str, uid: str,
                 prefix: str = "") -> str:
    return f"{store.run_prefix(namespace, name, uid, prefix)}/{DOCUMENT}"


def index_run(db: Database, store: ArtifactStore, key: str) -> int:
    """Index the run whose metrics.json is `key`; the number of rows (0: nothing to index)."""
    doc = json.loads(store.get(key))
    return db.upsert(rows(doc, store.modified(key)))


def reindex(db: Database, store: ArtifactStore, *, drop: bool = False) -> tuple[int, int]:
    """Rebuild the index from every run's metrics.json in the store: (runs, rows)."""
    if drop:
        db.drop()
    db.migrate()
    runs = total = 0
    for key in store.list(""):
        parts = key.split("/")
        if parts[-1] != DOCUMENT or len(parts) < 4 or "raw" in parts[3:-1]:
            continue
        try:
            n = index_run(db, store, key)
        except (ValueError, InfraError) as exc:
            log.warning("not indexed: %s: %s", key, exc)
            continue
        runs += bool(n)
        total += n
    # the change points there are now count as reported: rebuilding the index is no news
    for series in db.series_keys():
        db.record_points([row for row, _ in change_points(db, *series)])
    return runs, total
