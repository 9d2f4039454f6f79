"""`benchfarm history` and `benchfarm results reindex`: the results database from a shell.

Both read BENCHFARM_DATABASE_URL; reindex also the store (BENCHFARM_S3_*), the record it
rebuilds the index from.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
import time
from typing import Any

from ..errors import InfraError

_RELATIVE = re.compile(r"^(\d+)([hdw])$")


def since_arg(value: str) -> dt.datetime:
    """An ISO date or time (UTC unless it says otherwise), or a span back from now: 12h, 30d, 8w."""
    m = _RELATIVE.match(value.strip())
    if m:
        n, unit = int(m.group(1)), m.group(2)
        span = {"h": dt.timedelta(hours=n), "d": dt.timedelta(days=n), "w": dt.timedelta(weeks=n)}
        return dt.datetime.now(dt.UTC) - span[unit]
    try:
        when = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--since {value!r}: an ISO date/time or 12h, 30d, 8w"
                                         ) from exc
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def register(sub: argparse._SubParsersAction) -> None:
    h = sub.add_parser("history", help="a metric's history on a device type under a plan, with "
                                       "its change points (the results database)")
    h.add_argument("metric", help="STEP/NAME as in metrics.json (e.g. cyclictest/cyclictest-max, "
                                  "boot/kernel-to-prompt); `benchfarm history --list` lists them")
    h.add_argument("--device-type", default=None)
    h.add_argument("--plan", default=None)
    h.add_argument("--since", type=since_arg, default=None,
                   help="only runs finished since: an ISO date/time or 12h, 30d, 8w")
    h.add_argument("--format", choices=["json", "table"], default="table")
    h.set_defaults(func=main_history)
    res = sub.add_parser("results", help="the results database")
    res_sub = res.add_subparsers(dest="results_cmd", required=True)
    re_ = res_sub.add_parser("reindex", help="rebuild the results database from the store "
                                             "(every run's metrics.json)")
    re_.add_argument("--drop", action="store_true", help="drop every table first")
    re_.set_defaults(func=main_reindex)
    ls = res_sub.add_parser("series", help="list the (metric, device type, plan) series")
    ls.set_defaults(func=main_series)


def _fail(exc: InfraError) -> int:
    print(f"benchfarm: {exc}", file=sys.stderr)
    return 1


def main_history(args: argparse.Namespace) -> int:
    if not args.device_type or not args.plan:
        print("benchfarm history: give --device-type and --plan (`benchfarm results series` "
              "lists the series)", file=sys.stderr)
        return 2
    from .db import Database
    from .query import history
    try:
        doc = history(Database.from_env(), args.metric, args.device_type, args.plan, args.since)
    except InfraError as exc:
        return _fail(exc)
    if args.format == "json":
        print(json.dumps(doc, indent=2))
    else:
        print(table(doc))
    return 0


def table(doc: dict[str, Any]) -> str:
    at = {p["index"]: p for p in doc["changePoints"]}
    lines = [f"{doc['metric']} ({doc['unit'] or '?'}, "
             f"{'higher' if doc['higherIsBetter'] else 'lower'} is better) on "
             f"{doc['deviceType']}, plan {doc['plan']}: {len(doc['series'])} runs, "
             f"{len(doc['changePoints'])} change point(s)",
             f"{'time':20} {'run':32} {'software':24} {'board':12} {'mean':>12} "
             f"{'min':>10} {'max':>10} {'n':>3}"]
    for i, s in enumerate(doc["series"]):
        if i in at:
            p = at[i]
            lines.append(f"---- change point: {p['direction']} {p['magnitude']:+.2f} % "
                         f"(p {p['pvalue']:.2g}) from {p['run']} ({p['software']}) ----")
        run = s["run"] + (f" [{s['side']}]" if s["side"] else "")
        lines.append(f"{s['time'][:19]:20} {run:32} {s['software'][:24]:24} {s['board']:12} "
                     f"{s['mean']:12.4g} {s['min']:10.4g} {s['max']:10.4g} {len(s['samples']):3}")
    return "\n".join(lines)


def main_series(args: argparse.Namespace) -> int:
    from .db import Database
    try:
        rows = Database.from_env().known_series()
    except InfraError as exc:
        return _fail(exc)
    for r in rows:
        print(f"{r['deviceType']:20} {r['plan']:24} {r['metric']} ({r['unit']}): {r['runs']} runs")
    return 0


def main_reindex(args: argparse.Namespace) -> int:
    from ..store.artifacts import ArtifactStore, StoreConfig
    from .db import Database
    from .index import reindex
    t0 = time.monotonic()
    try:
        runs, rows = reindex(Database.from_env(), ArtifactStore(StoreConfig.from_env()),
                             drop=args.drop)
    except InfraError as exc:
        return _fail(exc)
    print(f"indexed {runs} runs ({rows} rows) in {time.monotonic() - t0:.1f} s")
    return 0
