"""A finished run's metrics.json (the record, in the store) as rows of the results database.

`rows` is the pure part: which metrics a document has and their direction come from
`core.statistics.results.samples_from_document` (the one definition reports and comparisons use); the run's
namespace, name and uid come from where the document lies in the store (`core.policy.runkey`), never
from the document, whose own `run` fields a tenant's suite could have written. Only the counted
iterations' values are samples (`core.statistics.measured.counted`: no warm-up, no error, measured
inside the envelope): where the document has its records, each series' values are taken from
them again (`counted_series`), so an iteration marked invalid never enters a series whatever the
document's own `series` says. `conditions_rows` gives what each step's counted iterations were
measured under (`core.statistics.measured.by_step`), one row per (side, step), indexed with the
run's rows. `index_run` reads one run's document and upserts it unless its identity disagrees
with its key (`NotThisRun`);
`reindex` rebuilds the index from every metrics.json in the store, skips and counts the documents
that disagree, and takes the change points it then finds as reported (a rebuilt index raises no
events).
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any, NamedTuple

from benchfarm.core.policy.runkey import DOCUMENT, RunKey, disagreement, is_run_document, run_of_key
from benchfarm.core.statistics.measured import by_step, counted_series
from benchfarm.core.statistics.results import samples_from_document
from benchfarm.errors import InfraError
from benchfarm.history.db import Database
from benchfarm.history.query import change_points
from benchfarm.store.artifacts import ArtifactStore

log = logging.getLogger("benchfarm.history")
__all__ = ["DOCUMENT", "NotThisRun", "Reindexed", "conditions_rows", "document_key", "index_run",
           "reindex", "rows"]


class NotThisRun(ValueError):
    """A document not indexed because its identity is not the one of where it lies."""


class Reindexed(NamedTuple):
    runs: int
    rows: int
    skipped: list[tuple[str, str]]      # (key, why) of each document left out for its identity


def _time(value: Any, fallback: dt.datetime | None) -> dt.datetime:
    if isinstance(value, str) and value:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return fallback or dt.datetime.now(dt.UTC)


def _side_rows(where: RunKey, run: dict[str, Any], doc: dict[str, Any], side: str,
               software: dict[str, Any], when: dt.datetime) -> list[dict[str, Any]]:
    provenance = doc.get("provenance") or {}
    samples, direction = samples_from_document(counted_series(doc))
    identity = {
        "run_uid": where.uid, "side": side, "namespace": where.namespace, "name": where.name,
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


def rows(doc: dict[str, Any], where: RunKey, modified: dt.datetime | None = None
         ) -> list[dict[str, Any]]:
    """The rows of one metrics.json of the run `where` (its key's identity): per side of an A/B
    run, or the run's own. The document's own namespace, name and uid are not read here (check
    them first: `core.policy.runkey.disagreement`)."""
    run = doc.get("run") or {}
    when = _time(run.get("finishedAt"), modified)
    software = run.get("softwareSets") or {}
    if doc.get("sides"):
        return [r for label, side_doc in doc["sides"].items()
                for r in _side_rows(where, run, side_doc, label,
                                    software.get(label) or {"name": label}, when)]
    return _side_rows(where, run, doc, "", next(iter(software.values()), {}), when)


def conditions_rows(doc: dict[str, Any], where: RunKey) -> list[dict[str, Any]]:
    """What each step of the run `where` was measured under, per A/B side: rows of
    `run_conditions` (none for steps that recorded no conditions)."""
    sides = doc.get("sides") or {"": doc}
    out = []
    for side, side_doc in sides.items():
        for step, m in by_step(side_doc).items():
            out.append({"run_uid": where.uid, "side": side, "step": step,
                        "namespace": where.namespace, "iterations": m.iterations,
                        "min_mhz": m.min_mhz, "median_mhz": m.median_mhz, "max_mhz": m.max_mhz,
                        "governors": list(m.governors), "min_temp_c": m.min_temp_c,
                        "max_temp_c": m.max_temp_c, "mean_power_w": m.mean_power_w,
                        "simulated": m.simulated})
    return out


def document_key(store: ArtifactStore, namespace: str, name: str, uid: str,
                 prefix: str = "") -> str:
    return f"{store.run_prefix(namespace, name, uid, prefix)}/{DOCUMENT}"


def index_run(db: Database, store: ArtifactStore, key: str, run: RunKey | None = None) -> int:
    """Index the run whose metrics.json is `key`; the number of rows. `run`: the run object's
    identity, when the caller has one (the operator): the key must lie under it. NotThisRun when
    the key is no run's, lies under another run, or the document names another run than its
    key."""
    where = run_of_key(key)
    if where is None:
        raise NotThisRun(f"{key}: not under a run's <namespace>/<name>/<uid>/")
    if run is not None and where != run:
        raise NotThisRun(f"{key}: not under the run's own {run.namespace}/{run.name}/{run.uid}/")
    doc = store.get_document(key)
    if doc is None:
        raise NotThisRun(f"{key}: no metrics document (none, too large or not one)")
    why = disagreement(doc, where)
    if why is not None:
        raise NotThisRun(f"{key}: {why}")
    return db.upsert(rows(doc, where, store.modified(key)), conditions_rows(doc, where))


def reindex(db: Database, store: ArtifactStore, *, drop: bool = False) -> Reindexed:
    """Rebuild the index from every run's metrics.json in the store: the runs and rows indexed,
    and the documents skipped because their identity disagrees with their key (each logged)."""
    if drop:
        db.drop()
    db.migrate()
    runs = total = 0
    skipped: list[tuple[str, str]] = []
    for key in store.list(""):
        if not is_run_document(key):
            continue
        try:
            n = index_run(db, store, key)
        except NotThisRun as exc:
            log.warning("skipped, its identity disagrees with its key: %s", exc)
            skipped.append((key, str(exc)))
            continue
        except (ValueError, InfraError) as exc:
            log.warning("not indexed: %s: %s", key, exc)
            continue
        runs += bool(n)
        total += n
    # the change points there are now count as reported: rebuilding the index is no news
    for series in db.series_keys(None):
        db.record_points([row for row, _ in change_points(db, *series)])
    return Reindexed(runs, total, skipped)
