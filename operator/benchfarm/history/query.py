"""One series' history with its change points, in the JSON shape the CLI and the web page show.

A series is one namespace's runs of a metric on a device type under a plan: its points, its
change points and the events they raise are computed from that namespace's runs only.
`history(db, namespace, metric, device_type, plan, since)` ->
`{"namespace", "metric", "deviceType", "plan", "unit", "higherIsBetter",
  "series": [{"run": "ns/name", "time", "software", "board", "mean", "samples", ...}],
  "changePoints": [{"run": "ns/name", "software", "board", "time", "magnitude", "pvalue",
  "direction": "regression"|"improvement", "conditions": ["frequency 1000 → 600 MHz", ...],
  "note": "measured under other conditions: ..." (or "")}]}`: a change point whose runs before
and after were measured under other conditions (the runs' `run_conditions` of the metric's step,
core.statistics.measured.around) says so beside the build. `known_series(db, namespaces)` lists
the series of those namespaces (None: all, a lab admin's view). A/B runs give a point per side
(`side`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from benchfarm.core.statistics.changepoints import detect
from benchfarm.core.statistics.measured import Measured, around, note
from benchfarm.errors import Outage
from benchfarm.history.db import Database, Series


def _software(row: dict[str, Any]) -> str:
    return str(row["software"] or row["kernel_release"] or "")


def _point(row: dict[str, Any]) -> dict[str, Any]:
    return {"run": f"{row['namespace']}/{row['name']}", "uid": row["run_uid"],
            "side": row["side"], "time": row["time"].isoformat(), "software": _software(row),
            "kernelRelease": row["kernel_release"], "board": row["board"],
            "mean": row["mean"], "min": min(row["samples"]), "max": max(row["samples"]),
            "samples": list(row["samples"])}


def _measured(row: dict[str, Any] | None) -> Measured | None:
    if row is None:
        return None
    return Measured(row["iterations"], row["min_mhz"], row["median_mhz"], row["max_mhz"],
                    tuple(row["governors"] or ()), row["min_temp_c"], row["max_temp_c"],
                    row["mean_power_w"], bool(row["simulated"]))


def _conditions_around(db: Database, metric: str, rows: list[dict[str, Any]],
                       points: list[int]) -> list[list[str]]:
    """How the conditions differ at each point: read only when the series has points."""
    if not points:
        return []
    step = metric.split("/", 1)[0]
    known = db.step_conditions(step, ((r["run_uid"], r["side"]) for r in rows))
    return around(points, [_measured(known.get((r["run_uid"], r["side"]))) for r in rows])


def history(db: Database, namespace: str, metric: str, device_type: str, plan: str,
            since: dt.datetime | None = None, *, with_points: bool = True) -> dict[str, Any]:
    """The series of `metric` on `device_type` under `plan` in `namespace` (oldest first) and
    its change points (none looked for unless `with_points`). Raises Outage when the database
    is unreachable."""
    rows = db.series_rows(namespace, metric, device_type, plan, since)
    series = [_point(r) for r in rows]
    higher = bool(rows[0]["higher_is_better"]) if rows else True
    found = detect([r["samples"] for r in rows], higher) if with_points else []
    differ = _conditions_around(db, metric, rows, [cp.index for cp in found])
    points = []
    for cp, conditions in zip(found, differ, strict=True):
        first = rows[cp.index]
        points.append({"run": f"{first['namespace']}/{first['name']}", "uid": first["run_uid"],
                       "side": first["side"], "index": cp.index,
                       "time": first["time"].isoformat(), "software": _software(first),
                       "board": first["board"], "magnitude": cp.magnitude, "pvalue": cp.pvalue,
                       "direction": cp.direction, "conditions": conditions,
                       "note": note(conditions)})
    return {"namespace": namespace, "metric": metric, "deviceType": device_type, "plan": plan,
            "unit": rows[0]["unit"] if rows else None, "higherIsBetter": higher,
            "series": series, "changePoints": points}


def known_series(db: Database, namespaces: Iterable[str] | None) -> list[dict[str, Any]]:
    """[{"namespace", "metric", "deviceType", "plan", "unit", "higherIsBetter", "runs",
    "last"}] of `namespaces` (None: every namespace)."""
    return db.known_series(namespaces)


def change_points(db: Database, namespace: str, metric: str, device_type: str, plan: str
                  ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The series' change points now, each as (its row of `change_points`, the point as
    `history` shows it): what the indexer compares with the points already reported."""
    out = []
    for p in history(db, namespace, metric, device_type, plan)["changePoints"]:
        out.append(({"namespace": namespace, "metric": metric, "device_type": device_type,
                     "plan": plan, "run_uid": p["uid"], "direction": p["direction"],
                     "magnitude": p["magnitude"], "pvalue": p["pvalue"]}, p))
    return out


_DATABASES: dict[str, Database] = {}


def change_points_of(url: str, series: list[Series]
                     ) -> tuple[list[tuple[dict[str, Any], dict[str, Any]]], str | None]:
    """`change_points` of several series, in a process of the caller's (the operator's
    indexer runs it in a worker process: the search is seconds of CPU at thousands of runs, which
    would hold the operator's GIL). Returns (the points, None), or ([], why) when the database
    is unreachable (an Outage does not cross a process boundary)."""
    db = _DATABASES.get(url)
    if db is None:
        db = _DATABASES[url] = Database(url)
    try:
        return [pair for s in series for pair in change_points(db, *s)], None
    except Outage as exc:
        return [], str(exc)
