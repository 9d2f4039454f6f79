"""`benchfarm history`, `benchfarm results series` and `benchfarm results reindex`: the results
database from a shell.

All read BENCHFARM_DATABASE_URL; reindex also the store (BENCHFARM_S3_*), the record it rebuilds
the index from. `history` and `series` show one namespace's series (`-n`, default the
kubeconfig's), or every namespace's with `--all-namespaces`; the CLI asks Kubernetes whether the
caller may read them first (`Scope`). The database URL itself reads everything: it is a lab
admin's credential, and tenants read their history on the dashboard.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import re
import sys
import time
from collections.abc import Callable
from typing import Any

from benchfarm.errors import InfraError
from benchfarm.logs import configure
from benchfarm.settings import Settings

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


# Who may read which namespace is Kubernetes' to say, and this module knows no Kubernetes: the CLI
# hands `register` a function that turns `-n`/`--all-namespaces` (and the CLI's settings: its
# kubeconfig) into the namespaces to show (None: every one) or raises ScopeRefused with a sentence
# for the person.
Scope = Callable[[str | None, bool, Settings], frozenset[str] | None]


class ScopeRefused(Exception):
    """The caller may not read the namespace(s) asked for; the message says which and why."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], scope: Scope) -> None:
    h = sub.add_parser("history", help="a metric's history on a device type under a plan in one "
                                       "namespace, with its change points (the results database)")
    h.add_argument("metric", help="STEP/NAME as in metrics.json (e.g. cyclictest/cyclictest-max, "
                                  "boot/kernel-to-prompt); `benchfarm results series` lists them")
    h.add_argument("--device-type", default=None,
                   help="the device type of the series (its boards' runs)")
    h.add_argument("--plan", default=None, help="the TestPlan of the series")
    h.add_argument("--since", type=since_arg, default=None,
                   help="only runs finished since: an ISO date/time or 12h, 30d, 8w")
    h.add_argument("--format", choices=["json", "table"], default="table",
                   help="a table for people, or JSON (one object per namespace with -A)")
    _namespace_args(h, "the series of every namespace, one after the other")
    h.set_defaults(func=lambda args: main_history(args, scope))
    res = sub.add_parser("results", help="the results database")
    res_sub = res.add_subparsers(dest="results_cmd", required=True)
    re_ = res_sub.add_parser("reindex", help="rebuild the results database from the store "
                                             "(every run's metrics.json; a document whose "
                                             "identity disagrees with its key is skipped)")
    re_.add_argument("--drop", action="store_true", help="drop every table first")
    re_.set_defaults(func=main_reindex)
    ls = res_sub.add_parser("series", help="list one namespace's (metric, device type, plan) "
                                           "series")
    ls.add_argument("--format", choices=["json", "table"], default="table",
                    help="a table for people, or JSON")
    _namespace_args(ls, "every namespace's series")
    ls.set_defaults(func=lambda args: main_series(args, scope))


def _namespace_args(p: argparse.ArgumentParser, everything: str) -> None:
    which = p.add_mutually_exclusive_group()
    which.add_argument("-n", "--namespace", default=None,
                       help="the namespace whose runs make the series (default: the "
                            "kubeconfig's current namespace)")
    which.add_argument("-A", "--all-namespaces", action="store_true",
                       help=f"{everything} (a lab admin's: get benchmarkruns cluster-wide)")


def _fail(exc: InfraError | ScopeRefused) -> int:
    print(f"benchfarm: {exc}", file=sys.stderr)
    return 1


def main_history(args: argparse.Namespace, scope: Scope) -> int:
    if not args.device_type or not args.plan:
        print("benchfarm history: give --device-type and --plan (`benchfarm results series` "
              "lists the series)", file=sys.stderr)
        return 2
    from benchfarm.history.db import Database
    from benchfarm.history.query import history
    try:
        namespaces = scope(args.namespace, args.all_namespaces, args.settings)
        db = Database.from_settings(args.settings)
        if namespaces is None:      # every namespace that has this series, each on its own
            namespaces = frozenset(k[0] for k in db.series_keys(None)
                                   if k[1:] == (args.metric, args.device_type, args.plan))
        docs = [history(db, ns, args.metric, args.device_type, args.plan, args.since)
                for ns in sorted(namespaces)]
    except (InfraError, ScopeRefused) as exc:
        return _fail(exc)
    if not docs:
        print(f"benchfarm history: no namespace has runs of {args.metric} on "
              f"{args.device_type} with plan {args.plan}", file=sys.stderr)
        return 1
    if args.format == "json":
        print(json.dumps(docs if args.all_namespaces else docs[0], indent=2))
    else:
        print("\n\n".join(table(doc) for doc in docs))
    return 0


def table(doc: dict[str, Any]) -> str:
    at = {p["index"]: p for p in doc["changePoints"]}
    lines = [f"{doc['metric']} ({doc['unit'] or '?'}, "
             f"{'higher' if doc['higherIsBetter'] else 'lower'} is better) on "
             f"{doc['deviceType']}, plan {doc['plan']}, namespace {doc['namespace']}: "
             f"{len(doc['series'])} runs, {len(doc['changePoints'])} change point(s)",
             f"{'time':20} {'run':32} {'software':24} {'board':12} {'mean':>12} "
             f"{'min':>10} {'max':>10} {'n':>3}"]
    for i, s in enumerate(doc["series"]):
        if i in at:
            p = at[i]
            lines.append(f"---- change point: {p['direction']} {p['magnitude']:+.2f} % "
                         f"(p {p['pvalue']:.2g}) from {p['run']} ({p['software']})"
                         + (f"; {p['note']}" if p.get("note") else "") + " ----")
        run = s["run"] + (f" [{s['side']}]" if s["side"] else "")
        lines.append(f"{s['time'][:19]:20} {run:32} {s['software'][:24]:24} {s['board']:12} "
                     f"{s['mean']:12.4g} {s['min']:10.4g} {s['max']:10.4g} {len(s['samples']):3}")
    return "\n".join(lines)


def main_series(args: argparse.Namespace, scope: Scope) -> int:
    from benchfarm.history.db import Database
    try:
        namespaces = scope(args.namespace, args.all_namespaces, args.settings)
        rows = Database.from_settings(args.settings).known_series(namespaces)
    except (InfraError, ScopeRefused) as exc:
        return _fail(exc)
    if args.format == "json":
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        print(f"{r['namespace']:20} {r['deviceType']:20} {r['plan']:24} {r['metric']} "
              f"({r['unit']}): {r['runs']} runs")
    return 0


def main_reindex(args: argparse.Namespace) -> int:
    from benchfarm.history.db import Database
    from benchfarm.history.index import reindex
    from benchfarm.store.artifacts import ArtifactStore, StoreConfig
    # each skipped document is a line on stderr (the index module's log), the count on stdout
    configure(logging.WARNING, command="results reindex")
    t0 = time.monotonic()
    try:
        done = reindex(Database.from_settings(args.settings),
                       ArtifactStore(StoreConfig.from_settings(args.settings)), drop=args.drop)
    except InfraError as exc:
        return _fail(exc)
    print(f"indexed {done.runs} runs ({done.rows} rows) in {time.monotonic() - t0:.1f} s; "
          f"skipped {len(done.skipped)} document(s) whose identity disagrees with their key")
    return 0
