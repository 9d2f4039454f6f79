"""Results read back: `benchfarm report` and `compare` (a finished run, from any cluster),
`import-guide` (a vendor guide's tables, the baseline `compare` takes) and `parse` (a suite's
output, parsed as a session parses it).

The BenchmarkRun comes from the Kubernetes API (in-cluster, or KUBECONFIG / ~/.kube/config), its
`metrics.json` from the artifact store with the run's namespace's own credential (the Secret
`benchfarm-store` the operator issues, read with the same kubeconfig: `store.accounts`): a
kubeconfig is all it needs; `parse` and `import-guide` read files only. Nothing here knows the
dev lab.
Exit codes: 0 printed, 1 not found or unreachable (the message says which), 3 regressed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Any

from benchfarm.api.campaigns import BenchmarkCampaignStatus, ColumnPhase
from benchfarm.api.outcomes import Phase, Verdict
from benchfarm.api.runs import BenchmarkRunStatus
from benchfarm.errors import BenchfarmError
from benchfarm.settings import Settings


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("parse", help="parse a suite's output file into metrics (JSON)")
    p.add_argument("suite", help="the parser: a suite name of a plan's step (e.g. cyclictest)")
    p.add_argument("file", help="the output to parse; - for standard input")
    p.add_argument("--param", action="append", default=[], help="KEY=VALUE parser parameter")
    p.set_defaults(func=main_parse)
    rep = sub.add_parser("report", help="print the report of a finished run (any cluster: "
                                        "a kubeconfig)")
    rep.add_argument("run", help="NAMESPACE/NAME")
    rep.add_argument("--format", choices=["md", "rst", "json"], default="md",
                     help="Markdown, reStructuredText (the vendor guides' csv-table layout) or "
                          "the run's metrics as JSON")
    rep.set_defaults(func=lambda args: main_report(args.settings, args.run, args.format))
    cmp_ = sub.add_parser("compare", help="compare a run with a baseline run or a vendor guide "
                                          "(RST)")
    cmp_.add_argument("run", help="NAMESPACE/NAME of a finished run")
    cmp_.add_argument("baseline", help="NAMESPACE/NAME of another run, or an .rst/.txt guide file")
    cmp_.add_argument("--board", default=None,
                      help="the guide's board column to compare with (import-guide lists them)")
    cmp_.set_defaults(func=lambda args: main_compare(args.settings, args.run, args.baseline,
                                                         args.board))
    ig = sub.add_parser("import-guide", help="read a vendor guide's csv-tables (RST) as a "
                                             "baseline")
    ig.add_argument("file", help="the guide, reStructuredText (a report.rst or guide.rst too)")
    ig.add_argument("--format", choices=["json", "rst"], default="json",
                    help="the tables' metrics as JSON, or the tables again as RST")
    ig.add_argument("--board", default=None, help="only this board's columns")
    ig.set_defaults(func=lambda args: main_import_guide(args.file, args.format, args.board))


class Missing(StrEnum):
    """What `report` or `compare` found missing (`NotFound.reason`, said before its message)."""

    run = "RunNotFound"
    results = "NoResults"                   # the run (or campaign) has no results yet
    baseline = "BaselineNotFound"           # the guide, run or column to compare with
    nothing_in_common = "NothingInCommon"   # no metric both sides have


class NotFound(BenchfarmError):
    """A run, its metrics or a baseline file that is not there."""


def metrics(settings: Settings, run: str) -> dict[str, Any]:
    """The metrics document of a finished run NAMESPACE/NAME (or NAME in the current namespace)."""
    from benchfarm.kubeapi.client import Kube
    from benchfarm.kubeapi.kubeconfig import object_ref
    from benchfarm.store.accounts import namespace_store
    from benchfarm.store.artifacts import run_prefix
    ns, name = object_ref(settings, run)
    kube = Kube(settings, outage_budget=10)
    body = kube.get_run(ns, name)
    if body is None:
        raise NotFound(f"run {ns}/{name} not found", reason=Missing.run)
    store = namespace_store(kube.secret_data, ns, attempts=2)
    prefix = run_prefix(ns, name, body["metadata"]["uid"], body["spec"].get("artifactPrefix", ""))
    key = f"{prefix}/metrics.json"
    if store.sha256(key) is None:
        phase = BenchmarkRunStatus.of(body.get("status")).phase or Phase.pending
        raise NotFound(f"run {ns}/{name} has no results yet (phase {phase}); "
                       f"s3://{store.config.bucket}/{key} is missing", reason=Missing.results)
    doc: dict[str, Any] = json.loads(store.get(key))
    return doc


def campaign(settings: Settings, ref: str) -> tuple[str, list[Any]] | None:
    """A BenchmarkCampaign NAMESPACE/NAME as its release label and its guide's columns (their
    runs' metrics; a column without results is missing); None when there is no such campaign."""
    from benchfarm.kubeapi.client import Kube
    from benchfarm.kubeapi.kubeconfig import object_ref
    from benchfarm.report.release import Column
    ns, name = object_ref(settings, ref)
    body = Kube(settings, outage_budget=10).get_custom("benchmarkcampaigns", ns, name)
    if body is None:
        return None
    columns = []
    for c in BenchmarkCampaignStatus.of(body.get("status")).columns:
        try:
            doc = (metrics(settings, f"{ns}/{c.run}")
                   if c.phase == ColumnPhase.succeeded else None)
        except NotFound:
            doc = None
        columns.append(Column(c.name, doc, "" if doc else c.reason or "no results"))
    if not columns:
        raise NotFound(f"campaign {ns}/{name} has no columns yet", reason=Missing.results)
    return body["spec"]["release"], columns


def _campaign_not_run(settings: Settings, ref: str) -> tuple[str, list[Any]] | None:
    """The campaign a name means, when no BenchmarkRun has that name (a run wins)."""
    from benchfarm.kubeapi.client import Kube
    from benchfarm.kubeapi.kubeconfig import object_ref
    if Path(ref).suffix.lower() in (".rst", ".txt") or \
            Kube(settings, outage_budget=10).get_run(*object_ref(settings, ref)):
        return None
    return campaign(settings, ref)


def _compare_campaign(settings: Settings, ref: str, release: str, columns: list[Any], baseline: str,
                      board: str | None) -> tuple[str, bool]:
    """A campaign against another campaign (column by column, by name) or a guide (each column
    against the guide's board of the same name, or the one --board names)."""
    from benchfarm.core.guides.guide import GuideError, read_guide
    from benchfarm.core.statistics.regression import RegressionPolicy, Sample
    from benchfarm.report.release import Column, changes_md, release_changes
    policy = RegressionPolicy()
    other = _campaign_not_run(settings, baseline)
    if other is not None:
        previous_release, previous = other
    else:
        try:
            text = Path(baseline).read_text(errors="replace")
        except OSError as exc:
            raise NotFound(f"guide {baseline}: {exc.strerror}", reason=Missing.baseline) from exc
        guide = read_guide(text)
        previous_release, previous = baseline, []
        for col in columns:
            try:
                values = guide.baseline(board or col.name)
            except GuideError as exc:
                previous.append(Column(col.name, None, exc.message))
                continue
            previous.append(Column(col.name, None, summary={
                k: Sample.summary(v.mean, v.min, v.max) for k, v in values.items()}))
    changes = release_changes(previous, columns, policy)
    if not any(ch.comparisons for ch in changes):
        raise NotFound(f"{ref} and {baseline} have no metric in common",
                       reason=Missing.nothing_in_common)
    return (changes_md(release, previous_release, changes, policy.describe()),
            any(c.verdict == Verdict.regressed for ch in changes for c in ch.comparisons))


def report(settings: Settings, run: str, fmt: str = "md") -> str:
    from benchfarm.report.tables import markdown, rst
    doc = metrics(settings, run)
    if fmt == "json":
        return json.dumps(doc, indent=2)
    return {"md": markdown, "rst": rst}[fmt](doc)


def compare(settings: Settings, run: str, baseline: str,
            board: str | None = None) -> tuple[str, bool]:
    """The comparison table of a run against another run or a vendor guide (one board's column of
    it); and whether it regressed."""
    from benchfarm.core.guides.guide import read_guide
    from benchfarm.core.statistics.regression import (
        RegressionPolicy,
        Sample,
        compare as compare_samples,
    )
    from benchfarm.core.statistics.results import samples_by_metric_name, samples_from_document
    from benchfarm.report.tables import comparison_markdown
    found = _campaign_not_run(settings, run)
    if found is not None:
        return _compare_campaign(settings, run, *found, baseline, board)
    doc = metrics(settings, run)
    policy = RegressionPolicy()
    path = Path(baseline)
    if path.is_file() or path.suffix.lower() in (".rst", ".txt"):
        try:
            text = path.read_text(errors="replace")
        except OSError as exc:
            raise NotFound(f"guide {baseline}: {exc.strerror}", reason=Missing.baseline) from exc
        guide = read_guide(text).baseline(board)
        base = {k: Sample.summary(v.mean, v.min, v.max) for k, v in guide.items()}
        current, direction = samples_by_metric_name(doc)
    elif (other := _campaign_not_run(settings, baseline)) is not None:
        column = next((c for c in other[1] if c.name == board), None)
        if column is None or column.doc is None:
            raise NotFound(f"campaign {baseline}: name the column to compare with (--board): "
                           + ", ".join(c.name for c in other[1] if c.doc), reason=Missing.baseline)
        base, _ = samples_by_metric_name(column.doc)
        current, direction = samples_by_metric_name(doc)
    else:
        base, _ = samples_from_document(metrics(settings, baseline))
        current, direction = samples_from_document(doc)
    rows = compare_samples(base, current, direction, policy)
    if not rows:
        raise NotFound(f"{run} and {baseline} have no metric in common",
                       reason=Missing.nothing_in_common)
    return (comparison_markdown(rows, policy.describe(), f"Comparison with {baseline}"),
            any(r.verdict == Verdict.regressed for r in rows))


def main_report(settings: Settings, run: str, fmt: str) -> int:
    return _guarded("report", lambda: (print(report(settings, run, fmt)), 0)[1])


def main_compare(settings: Settings, run: str, baseline: str, board: str | None = None) -> int:
    def _run() -> int:
        table, regressed = compare(settings, run, baseline, board)
        print(table)
        return 3 if regressed else 0
    return _guarded("compare", _run)


def _guarded(cmd: str, fn: Callable[[], int]) -> int:
    from kubernetes.client.rest import ApiException
    from kubernetes.config import ConfigException
    try:
        return fn()
    except BenchfarmError as exc:
        print(f"benchfarm {cmd}: {exc.message}", file=sys.stderr)
    except ApiException as exc:
        print(f"benchfarm {cmd}: the Kubernetes API refused: {exc.status} {exc.reason}",
              file=sys.stderr)
    except ConfigException as exc:
        print(f"benchfarm {cmd}: no cluster configured (KUBECONFIG or in-cluster): {exc}",
              file=sys.stderr)
    return 1


def main_parse(args: argparse.Namespace) -> int:
    """`benchfarm parse`: the metrics of a suite's output (a file, or - for stdin) as JSON."""
    from benchfarm.suites.registry import parse
    try:
        text = Path(args.file).read_text(errors="replace") if args.file != "-" else sys.stdin.read()
        params = dict(p.split("=", 1) for p in args.param)
        metrics = parse(args.suite, text, params)
    except BenchfarmError as exc:
        print(f"benchfarm parse: {exc.message}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"benchfarm parse: {exc}", file=sys.stderr)
        return 1
    print(json.dumps([m.as_dict() for m in metrics], indent=2))
    return 0


def main_import_guide(path: str, fmt: str, board: str | None) -> int:
    """`benchfarm import-guide`: a vendor guide's tables (one board's columns) as JSON or RST,
    what it found and what it could not read on stderr."""
    from benchfarm.core.guides.guide import read_guide
    from benchfarm.report.tables import guide_rst
    try:
        guide = read_guide(Path(path).read_text(errors="replace"))
    except OSError as exc:
        print(f"benchfarm import-guide: {exc}", file=sys.stderr)
        return 1
    if board is not None and board not in guide.boards:
        print(f"benchfarm import-guide: no board {board!r} in {path}; boards: "
              f"{', '.join(guide.boards) or 'none named'}", file=sys.stderr)
        return 1
    tables = [t for t in guide.tables if board is None or t.board in ("", board)]
    print(f"benchfarm import-guide: {len(guide.tables)} tables, "
          f"{sum(len(t.rows) for t in guide.tables)} values; boards: "
          f"{', '.join(guide.boards) or 'none named'}", file=sys.stderr)
    for problem in guide.problems:
        print(f"benchfarm import-guide: {problem}", file=sys.stderr)
    if fmt == "rst":
        print(guide_rst(tables))
    else:
        print(json.dumps({"boards": guide.boards, "problems": guide.problems, "tables": [
            {"title": t.title, "board": t.board, "rows": [
                {"name": r.name, "unit": r.unit, "mean": r.value.mean, "min": r.value.min,
                 "max": r.value.max, "text": r.value.text} for r in t.rows]}
            for t in tables]}, indent=2))
    return 0
