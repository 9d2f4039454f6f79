"""Tables in the layout of the vendors' performance guides: Markdown, and RST csv-tables.

A metrics document (see core.results.metrics_document) in, text out. The RST follows TI's guides:
one `.. csv-table::` per suite with `:header: "Benchmarks","<board>: perf"`.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any


def _by_step(doc: dict[str, Any]) -> OrderedDict[str, list[dict[str, Any]]]:
    steps: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
    for s in doc.get("series", []):
        steps.setdefault(s["step"], []).append(s)
    return steps


def rail_tables(doc: dict[str, Any]) -> list[tuple[str, str, list[tuple[str, str, str]], str]]:
    """(step, mode, [(rail, volts, mW display)], total display) for each low-power measurement."""
    by_name = {(s["step"], s["name"]): s for s in doc.get("series", [])}
    out = []
    for (step, name), total in by_name.items():
        if not name.startswith("rail-total-"):
            continue
        mode = name[len("rail-total-"):]
        rows = []
        for (st, n), s in by_name.items():
            m = re.match(rf"^rail-(.+)-{re.escape(mode)}$", n)
            if st == step and m and m.group(1) != "total":
                volts = by_name.get((step, f"{n}-voltage"))
                v = f"{sum(volts['values']) / len(volts['values']):.2f}" if volts else ""
                rows.append((m.group(1), v, s["display"]))
        out.append((step, mode, rows, total["display"]))
    return out


_OPENSSL_SIZED = re.compile(r"^openssl-(.+)-(\d+)B$")
_PER_CORE = re.compile(r"^cyclictest-t(\d+)-(min|avg|max)$")
_LATENCY_ROWS = (("min", "Minimum (usec)"), ("avg", "Average (usec)"), ("max", "Maximum (usec)"))


def _mean(s: dict[str, Any]) -> float:
    return sum(s["values"]) / len(s["values"])


def guide_shapes(series: list[dict[str, Any]], board: str
                 ) -> tuple[list[dict[str, Any]], list[tuple[str, list[str], list[list[str]]]]]:
    """The guides' own table shapes for what has one: OpenSSL by algorithm and buffer size, and
    cyclictest per core (comma-joined per-thread figures, as the RT guides print them). Returns
    the series left for the generic table and [(title, header, rows)]."""
    rest, openssl, cores = [], [], {}
    for s in series:
        if (m := _OPENSSL_SIZED.match(s["name"])) and s["unit"] == "KB/s":
            openssl.append([m.group(1), m.group(2), s["display"]])
        elif m := _PER_CORE.match(s["name"]):
            cores.setdefault(m.group(2), {})[int(m.group(1))] = s
        else:
            rest.append(s)
    tables = []
    if openssl:
        openssl.sort(key=lambda r: (r[0], int(r[1])))
        tables.append(("OpenSSL Performance", ["Algorithm", "Buffer Size (in bytes)",
                                               f"{board}: throughput (KBytes/Sec)"], openssl))
    if cores:
        rows = [[label, ",".join(f"{_mean(cores[k][t]):.0f}" for t in sorted(cores[k]))]
                for k, label in _LATENCY_ROWS if k in cores]
        tables.append(("Latencies", ["Latencies", f"{board}:per-core"], rows))
    return rest, tables


def _is_rail_series(name: str) -> bool:
    return name.startswith("rail-")


def _failures(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in doc.get("records", []) if r.get("error")]


def markdown(doc: dict[str, Any]) -> str:
    run = doc.get("run", {})
    board = run.get("board", "board")
    lines = [f"# Benchmark report: {run.get('namespace', '')}/{run.get('name', '')}", ""]
    facts = [("Board", board), ("Device type", run.get("deviceType")),
             ("Plan", run.get("plan")), ("Iterations", run.get("iterations")),
             ("Boot cycles", run.get("bootCycles")), ("Kernel", run.get("uname")),
             ("Result", run.get("result"))]
    lines += [f"- **{k}**: {v}" for k, v in facts if v not in (None, "")]
    lines.append("")
    boot = doc.get("bootSummary", {})
    if boot:
        lines += ["## Boot time", "", f"| Phase | {board}: seconds |", "|---|---|"]
        lines += [f"| {phase} | {s['display']} |" for phase, s in boot.items()]
        lines.append("")
        lines += _clocks(doc.get("kernelClocks") or [])
    for step, series in _by_step(doc).items():
        series, shaped = guide_shapes([s for s in series if not _is_rail_series(s["name"])], board)
        for title, header, rows in shaped:
            lines += [f"## {step}: {title}", "", "| " + " | ".join(header) + " |",
                      "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(r) + " |" for r in rows]
            lines.append("")
        if not series:
            continue
        lines += [f"## {step}", "", f"| Benchmarks | {board}: perf |", "|---|---|"]
        lines += [f"| {s['name']} ({s['unit']}) | {s['display']} |" for s in series]
        lines.append("")
    for step, mode, rows, total in rail_tables(doc):
        lines += [f"## {step}: {mode} power", "", "| Rail name | Rail voltage(V) | Power (mW) |",
                  "|---|---|---|"]
        lines += [f"| {rail} | {v} | {mw} |" for rail, v, mw in rows]
        lines += [f"| Total |  | {total} |", ""]
    lines += _repetition(doc.get("repeat"))
    failures = _failures(doc)
    if failures:
        lines += ["## Failed suites", "", "| Step | Iteration | Error |", "|---|---|---|"]
        lines += [f"| {r['step']} | {r['iteration']} | {r['error']} |" for r in failures]
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
             "clock for the others. Host arrival minus fused time, per boot:", "",
             "| Boot | Kernel time zero after power-on (s) | Stamped lines | Disagreement median "
             "(ms) | p95 (ms) |", "|---|---|---|---|---|"]
    for i, c in enumerate(clocks, 1):
        if c:
            d = c["disagreementMs"]
            lines.append(f"| {i} | {c['offset']:.3f} | {c['lines']} | {d['median']:g} | "
                         f"{d['p95']:g} |")
    return lines + [""]


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
        lines.append(f"| {m['metric']} | {m['n']} | {m['mean']:g} | {m['halfWidth95']:g} | {rel} | "
                     f"{'yes' if m['withinTarget'] else 'no'} |")
    return lines + [""]


def rst(doc: dict[str, Any]) -> str:
    board = doc.get("run", {}).get("board", "board")
    out: list[str] = []
    boot = doc.get("bootSummary", {})
    sections: list[tuple[str, list[tuple[str, str]]]] = []
    if boot:
        sections.append(("Boot time", [(f"{p} (s)", s["display"]) for p, s in boot.items()]))
    shaped_tables: list[tuple[str, str, list[str], list[list[str]]]] = []
    for step, series in _by_step(doc).items():
        series, shaped = guide_shapes([s for s in series if not _is_rail_series(s["name"])], board)
        shaped_tables += [(step, title, header, rows) for title, header, rows in shaped]
        rows = [(f"{s['name']} ({s['unit']})", s["display"]) for s in series]
        if rows:
            sections.append((step, rows))
    for title, rows in sections:
        out += [title, "^" * len(title), "", ".. csv-table::",
                f'   :header: "Benchmarks","{board}: perf"', "   :widths: 10, 10", ""]
        out += [f'   "{name}","{value}"' for name, value in rows]
        out.append("")
    for step, title, header, rows in shaped_tables:   # titled as the guides title them
        section = f"{step}: {title}"
        out += [section, "^" * len(section), "", f".. csv-table:: {title}",
                "   :header: " + ",".join(f'"{h}"' for h in header), ""]
        out += ["   " + ",".join(f'"{c}"' for c in r) for r in rows]
        out.append("")
    for step, mode, rails, total in rail_tables(doc):
        title = f"{mode} Power Performance"
        out += [f".. csv-table:: {title}", '     :header: "Rail name","Rail voltage(V)","Power (mW)"',
                ""]
        out += [f'     "{rail}", "{v}", "{mw}"' for rail, v, mw in rails]
        out += [f'     "Total"," ","{total}"', ""]
    return "\n".join(out)


def _guide_value(mean: float, lo: float, hi: float) -> str:
    if lo == hi:
        return f"{mean:.2f}"
    return f"{mean:.2f} (min {lo:.2f}, max {hi:.2f})"


def guide_rst(tables: list[Any]) -> str:
    """Render imported guide tables (core.guide.GuideTable) as the guides' two-column csv-tables,
    one per table and board, rows named as benchfarm names them (importing it again is lossless)."""
    out: list[str] = []
    for t in tables:
        column = f"{t.board}: perf" if t.board else "perf"
        out += [f".. csv-table:: {t.title}", f'    :header: "Benchmarks","{column}"', ""]
        for row in t.rows:
            v = row.value
            out.append(f'    "{row.name} ({row.unit})","{_guide_value(v.mean, v.min, v.max)}"')
        out.append("")
    return "\n".join(out)


def comparison_markdown(comparisons: list[Any], rule: str, baseline_name: str) -> str:
    lines = [f"## Comparison with {baseline_name}", "", rule, "",
             "| Metric | Baseline | This run | Change | Verdict | Evidence |",
             "|---|---|---|---|---|---|"]
    for c in comparisons:
        lines.append(f"| {c.key} | {c.baseline.display} | {c.current.display} | {c.change:+.1%} | "
                     f"{c.verdict} | {c.evidence} |")
    return "\n".join(lines) + "\n"
