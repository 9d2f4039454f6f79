"""Tables in the layout of the vendors' performance guides: Markdown, and RST csv-tables.

A metrics document (see core.statistics.results.metrics_document) in, text out. The guides' own shapes
(report.shapes) come first in each step, the rest of a step in TI's generic layout: one
`.. csv-table::` with `:header: "Benchmarks","<board>: perf"`. Then what each step was measured
under (report.conditions).
"""

from __future__ import annotations

from typing import Any

from benchfarm.core.statistics.stats import figure
from benchfarm.report import conditions
from benchfarm.report.escape import csv_row, line, md, md_row
from benchfarm.report.shapes import Table, shape


def _failures(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in doc.get("records", []) if r.get("error")]


def markdown(doc: dict[str, Any]) -> str:
    if doc.get("sides"):
        return _ab_markdown(doc)
    run = doc.get("run", {})
    board = run.get("board", "board")
    lines = [f"# Benchmark report: {md(run.get('namespace', ''))}/{md(run.get('name', ''))}", ""]
    software = (doc.get("provenance") or {}).get("software") or {}
    deployed = ", ".join(f"{part} sha256 {f['sha256'][:16]}…" for part, f in software.items()
                         if isinstance(f, dict) and "sha256" in f)
    facts = [("Board", board), ("Device type", run.get("deviceType")),
             ("Plan", run.get("plan")), ("Iterations", run.get("iterations")),
             ("Boot cycles", run.get("bootCycles")), ("Kernel", run.get("uname")),
             ("Software", f"{software.get('name', '')}: {deployed}" if deployed else None),
             ("Result", run.get("result"))]
    lines += [f"- **{k}**: {md(v)}" for k, v in facts if v not in (None, "")]
    lines.append("")
    shaped = shape(doc)
    if shaped.boot:
        lines += ["## Boot time", ""] + _md_table(shaped.boot)
        lines += _clocks(doc.get("kernelClocks") or [])
        for n, failed in (doc.get("bootRetries") or {}).items():
            lines += [f"Boot {md(n)} took {len(failed) + 1} power cycles; the failed attempts: "
                      f"{md('; '.join(failed))}", ""]
    for step, series in shaped.rest.items():
        for table in (t for t in shaped.tables if t.section == step):
            lines += [f"## {md(step)}: {md(table.title)}", ""] + _md_table(table)
        if series:
            lines += [f"## {md(step)}", ""] + _md_table(_generic(step, series, board))
    lines += conditions.markdown_lines(doc)
    lines += _repetition(doc.get("repeat"))
    failures = _failures(doc)
    if failures:
        lines += ["## Failed suites", "", "| Step | Iteration | Error |", "|---|---|---|"]
        lines += [md_row((r["step"], r["iteration"], r["error"])) for r in failures]
        lines.append("")
    lines.append("Values are mean (min, max) across measured iterations; a plain number when all "
                 "iterations agree.")
    return "\n".join(lines) + "\n"


def _clocks(clocks: list[dict[str, Any] | None]) -> list[str]:
    """How the kernel's printk clock and the host's agreed, boot by boot."""
    seen = [c for c in clocks if c]
    if not seen:
        return []
    lines = ["Phases use the kernel's printk clock for events on stamped lines and the host's "
             "clock for the others. The kernel's clock is placed on the host's by the line no "
             "stamped line arrived before (its zero after power-on, and its rate: host seconds "
             "per kernel second). Held lines were printed before the console was up and arrived "
             "together; over the others, host arrival minus fused time per boot: all of them "
             "(mostly lines queued behind a burst), and those printed and received after a pause "
             "(the two clocks' own disagreement):", "",
             "| Boot | Kernel time zero after power-on (s) | Rate | Stamped lines | Held | "
             "Median (ms) | p95 (ms) | After a pause | Median (ms) | p95 (ms) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for i, c in enumerate(clocks, 1):
        if c:
            d, q = c["disagreementMs"], c.get("quiet") or {}
            lines.append(f"| {i} | {c['offset']:.3f} | {c.get('rate', 1.0):.4f} | {c['lines']} | "
                         f"{c.get('held', '')} | {d['median']:g} | {d['p95']:g} | "
                         f"{q.get('lines', '')} | {_ms(q.get('medianMs'))} | "
                         f"{_ms(q.get('p95Ms'))} |")
    for i, c in enumerate(clocks, 1):
        if c and c.get("restarts"):
            lines += ["", f"Boot {i}: the kernel's clock started over {c['restarts']} time(s) (an "
                      "x86 kernel whose fast TSC calibration failed stamps its early lines by "
                      "jiffies); it is placed by its last epoch, and events stamped before keep "
                      "the host's time."]
    return lines + [""]


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:g}"


def _repetition(rep: dict[str, Any] | None) -> list[str]:
    """Why the run stopped after as many iterations as it did (spec.repeat)."""
    if not rep:
        return []
    target = f"+-{rep['target'] * 100:g} %"
    why = (f"every headline metric's 95 % confidence interval was within {target} of its mean"
           if rep["stoppedBecause"] == "stable" else
           f"the maximum of {rep['maxIterations']} iterations was reached before every headline "
           f"metric's 95 % confidence interval was within {target}")
    lines = ["## Repetition", "",
             f"Stopped after {rep['iterations']} iterations (at least {rep['minIterations']}, at "
             f"most {rep['maxIterations']}): {why}.", "",
             "| Headline metric | n | Mean | 95 % CI half-width | Relative | Within target |",
             "|---|---|---|---|---|---|"]
    for m in rep["metrics"]:
        rel = "n/a" if m["relativeCI95"] is None else f"+-{m['relativeCI95'] * 100:.2f} %"
        lines.append(md_row((m["metric"], m["n"], f"{m['mean']:g}", f"{m['halfWidth95']:g}", rel,
                             "yes" if m["withinTarget"] else "no")))
    return lines + [""]


def _ab_markdown(doc: dict[str, Any]) -> str:
    """An A/B run: the verdict's table, then each side's report."""
    run, sides = doc.get("run", {}), doc["sides"]
    ab = run.get("ab") or {}
    a, b = md(f"A ({ab.get('a')})"), md(f"B ({ab.get('b')})")
    lines = [f"# A/B run: {md(run.get('namespace', ''))}/{md(run.get('name', ''))}", "",
             f"Iterations alternated {a} and {b} on {md(run.get('board'))}; each iteration "
             f"booted its side.", ""]
    comparison = doc.get("comparison") or {}
    if comparison:
        lines += [f"## A/B: {b} against {a}", "", md(comparison.get("rule", "")), "",
                  f"| Metric | {a} | {b} | Change | Verdict | Evidence |",
                  "|---|---|---|---|---|---|"]
        lines += [md_row((r["key"], r["baseline"], r["current"], f"{r['change']:+.1%}",
                          r["verdict"], r["evidence"])) for r in comparison.get("rows", [])]
        lines.append("")
    return "\n".join(lines) + "\n" + "\n".join(markdown(d) for d in sides.values())


def rst(doc: dict[str, Any]) -> str:
    if doc.get("sides"):
        return "\n".join(rst(d) for d in doc["sides"].values())
    board = doc.get("run", {}).get("board", "board")
    shaped = shape(doc)
    out: list[str] = []
    if shaped.boot:
        out += _rst_table("Boot time", shaped.boot)
    for step, series in shaped.rest.items():
        for table in (t for t in shaped.tables if t.section == step):
            out += _rst_table(f"{step}: {table.title}", table)
        if series:      # untitled: the section names it, as the guides' generic tables
            out += _rst_table(step, _generic(step, series, board), titled=False)
    return "\n".join(out + conditions.rst_lines(doc))


def _generic(step: str, series: list[dict[str, Any]], board: str) -> Table:
    return Table(step, "", ["Benchmarks", f"{board}: perf"],
                 [[f"{s['name']} ({s['unit']})", s["display"]] for s in series])


def _md_table(table: Table) -> list[str]:
    return ([md_row(table.header), "|" + "---|" * len(table.header)]
            + [md_row(r) for r in table.rows] + [""])


def _rst_table(section: str, table: Table, titled: bool = True) -> list[str]:
    section = line(section)
    directive = f".. csv-table:: {line(table.title)}" if titled else ".. csv-table::"
    return ([section, "^" * len(section), "", directive, f"   :header: {csv_row(table.header)}",
             ""] + [f"   {csv_row(r)}" for r in table.rows] + [""])


def guide_rst(tables: list[Any]) -> str:
    """Render imported guide tables (core.guides.guide.GuideTable) as the guides' two-column csv-tables,
    one per table and board, rows named as benchfarm names them (importing it again is lossless)."""
    out: list[str] = []
    for t in tables:
        column = f"{t.board}: perf" if t.board else "perf"
        out += [f".. csv-table:: {line(t.title)}", f"    :header: {csv_row(['Benchmarks', column])}",
                ""]
        for row in t.rows:
            v = row.value
            out.append(f"    {csv_row([f'{row.name} ({row.unit})', figure(v.mean, v.min, v.max)])}")
        out.append("")
    return "\n".join(out)


def comparison_markdown(comparisons: list[Any], rule: str, title: str,
                        columns: tuple[str, str] = ("Baseline", "This run")) -> str:
    lines = [f"## {md(title)}", "", md(rule), "",
             md_row(("Metric", *columns, "Change", "Verdict", "Evidence")),
             "|---|---|---|---|---|---|"]
    for c in comparisons:
        lines.append(md_row((c.key, c.baseline.display, c.current.display, f"{c.change:+.1%}",
                             c.verdict, c.evidence)))
    return "\n".join(lines) + "\n"
