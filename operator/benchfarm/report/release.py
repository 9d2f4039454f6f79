"""A release's performance guide: the runs of one plan on several boards as the vendors' guides
lay them out, one column per board, and what changed against the previous release.

The vendors publish one guide per SDK release and SoC family; in each, every benchmark table has
one column per board (`"Benchmarks","am62xx_lp_sk-fs: perf","am62xx_sk-fs: perf"`), cells
`mean (min, max)`, sections in a fixed order: system benchmarks, then boot time, then the drivers.
Each run's tables are the report's own (report.shapes): the same titles and labels, so the guide
imports back (core.guides.cells) to every metric each board measured, column by column. A column
whose run did not finish stays in every table, its cells `n/a`, and the guide says why.

A column's name is how the guide's header names its board (`qemu-x86: perf`): it must contain a
digit, `_` or `-`, as the guides' board names do, for import-guide to see a board in it.

What each board was measured under opens the guide, as the vendors' "Evaluation Modules" table
does (Name | Description: "AM62Lx Evaluation Module rev E1-1 with ARM running at 1.4GHz"), filled
from its run's measured conditions (core.statistics.measured.overall over the counted
iterations: the frequency range in the guides' words, the governors, the temperature range, the
average power, "(simulated)" where the device type's source is a stand-in), never typed by hand;
a column that measured none says "not measured". In RST it is a grid table as theirs, which
import-guide (csv-tables only) never takes for a benchmark table.
"""

from __future__ import annotations

import html as _html
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchfarm.core.guides.cells import board_of, key_columns
from benchfarm.core.statistics.measured import Measured, overall
from benchfarm.core.statistics.regression import Comparison, RegressionPolicy, Sample, compare
from benchfarm.core.statistics.results import samples_by_metric_name
from benchfarm.report.escape import csv_row, line, md, md_row
from benchfarm.report.shapes import Table, shape

MISSING = "n/a"
MODULES = "Evaluation Modules"                 # the board table's title, as the vendors'
MODULES_HEADER = ("Name", "Description")
MODULES_LEAD = ("All performance numbers provided in this document are gathered using following "
                "Evaluation Modules unless otherwise specified.")
SYSTEM = "System Benchmarks"
BOOT = "Boot-time Measurement"
# The drivers' sections in the guides' order, by the suite a step ran.
_DRIVERS = OrderedDict([
    ("ALSA SoC Audio Driver", ("alsa",)),
    ("Graphics", ("glmark2", "fps")),
    ("Ethernet", ("netperf", "iperf3")),
    ("Storage", ("fio", "dd")),
    ("Crypto", ("openssl",)),
    ("DMA", ("dmatest",)),
    ("Power Management", ("low-power",)),
])
_SECTION_OF = {suite: name for name, suites in _DRIVERS.items() for suite in suites}


@dataclass(frozen=True)
class Column:
    name: str                                  # the board column's name in every table
    doc: dict[str, Any] | None                 # its run's metrics document; None: missing
    missing: str = ""                          # why it is missing (reason: message)
    # a baseline read from a guide instead of a run: metric key -> core.statistics.regression.Sample
    summary: dict[str, Sample] | None = None


@dataclass
class GuideTable:
    step: str                                  # the plan's step (the section's subheading)
    title: str                                 # "" for a step's generic Benchmarks table
    header: list[str]
    rows: list[list[str]]


@dataclass
class ReleaseGuide:
    release: str
    columns: list[str]
    missing: dict[str, str]                    # column -> why
    sections: OrderedDict[str, list[GuideTable]] = field(default_factory=OrderedDict)
    modules: list[tuple[str, str]] = field(default_factory=list)   # (column, what it ran under)


def _frequency(low: float, high: float) -> str:
    """A frequency range as the guides say it: '1.4GHz', '0.6-1.0GHz', '300-600MHz'."""
    def ghz(mhz: float) -> str:
        text = f"{mhz / 1000:.2f}".rstrip("0")
        return text + "0" if text.endswith(".") else text
    if high < 1000:
        return f"{low:.0f}MHz" if round(low) == round(high) else f"{low:.0f}-{high:.0f}MHz"
    lo, hi = ghz(low), ghz(high)
    return f"{hi}GHz" if lo == hi else f"{lo}-{hi}GHz"


def _cpu(uname: object) -> str:
    """The CPU's family as the guides name it ('ARM running at'), from the board's `uname -a`."""
    words = str(uname or "").lower().split()
    if any(w.startswith(("aarch64", "arm")) for w in words):
        return "ARM"
    if any(w in ("x86_64", "i686", "i386", "amd64") for w in words):
        return "x86"
    return "RISC-V" if any(w.startswith("riscv") for w in words) else "CPU"


def _degrees(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return ""
    return f"{high:.0f} °C" if round(low) == round(high) else f"{low:.0f}-{high:.0f} °C"


def module_description(doc: dict[str, Any] | None, missing: str = "") -> str:
    """One board's line of the Evaluation Modules table, from its run's measured conditions."""
    if doc is None:
        return f"not measured ({missing or 'no result'})"
    run = doc.get("run") or {}
    what = " ".join(p for p in (str(run.get("deviceType") or ""),
                                f"board {run['board']}" if run.get("board") else "") if p)
    m: Measured | None = overall(doc)
    said = []
    if m is not None and m.min_mhz is not None and m.max_mhz is not None:
        said.append(f"{_cpu(run.get('uname'))} running at {_frequency(m.min_mhz, m.max_mhz)}")
    if m is not None and m.governors:
        said.append(f"governor {'/'.join(m.governors)}")
    if m is not None and (degrees := _degrees(m.min_temp_c, m.max_temp_c)):
        said.append(f"temperature {degrees}")
    if not said:
        return line(f"{what}: conditions not measured" if what else "conditions not measured")
    text = ", ".join(said) + (" (simulated)" if m is not None and m.simulated else "")
    if m is not None and m.mean_power_w is not None:
        text += f", average power {m.mean_power_w:.3g} W"
    return line(f"{what} with {text}" if what else text)


def _tables(doc: dict[str, Any], column: str) -> list[tuple[str, Table]]:
    """(section, table) of one run, its board named as the column."""
    doc = {**doc, "run": {**doc.get("run", {}), "board": column}}
    suite_of = {r["step"]: r["suite"] for r in doc.get("records", [])}
    shaped = shape(doc)
    out: list[tuple[str, Table]] = []
    if shaped.boot:
        out.append((BOOT, shaped.boot))
    for step, series in shaped.rest.items():
        section = _SECTION_OF.get(suite_of.get(step, ""), SYSTEM)
        out += [(section, t) for t in shaped.tables if t.section == step]
        if series:
            out.append((section, Table(step, "", ["Benchmarks", f"{column}: perf"],
                                       [[f"{s['name']} ({s['unit']})", s["display"]]
                                        for s in series])))
    return out


def release_guide(release: str, columns: Sequence[Column]) -> ReleaseGuide:
    """Every table any column has, with a column per board in the campaign's order."""
    names = [c.name for c in columns]
    # (section, step, title) -> key header, value labels (a dict as an ordered set: a list's `in`
    # made a table as wide as a run's metric budget quadratic), rows by key, cells by (column, label)
    merged: OrderedDict[tuple[str, str, str], dict[str, Any]] = OrderedDict()
    for col in columns:
        if col.doc is None:
            continue
        for section, table in _tables(col.doc, col.name):
            nkeys = key_columns(table.header)
            entry = merged.setdefault((section, table.section, table.title), {
                "keys": table.header[:nkeys], "labels": {}, "rows": OrderedDict()})
            labels = [board_of(h)[1] for h in table.header[nkeys:]]
            entry["labels"].update(dict.fromkeys(labels))
            for row in table.rows:
                cells = entry["rows"].setdefault(tuple(row[:nkeys]), {})
                for label, text in zip(labels, row[nkeys:], strict=False):
                    cells[(col.name, label)] = text
    order = [SYSTEM, BOOT, *_DRIVERS]
    guide = ReleaseGuide(release, names, {c.name: c.missing or "no result"
                                          for c in columns if c.doc is None},
                         modules=[(c.name, module_description(c.doc, c.missing))
                                  for c in columns])
    for (section, step, title), entry in sorted(merged.items(),
                                                key=lambda kv: order.index(kv[0][0])):
        header = list(entry["keys"]) + [f"{name}: {label}" for name in names
                                        for label in entry["labels"]]
        rows = [list(key) + [cells.get((name, label), MISSING if name in guide.missing else "")
                             for name in names for label in entry["labels"]]
                for key, cells in entry["rows"].items()]
        guide.sections.setdefault(section, []).append(GuideTable(step, title, header, rows))
    return guide


def _grid(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """An RST grid table, as the vendors write their Evaluation Modules table."""
    cells = [[line(c) for c in r] for r in (header, *rows)]
    widths = [max(len(r[i]) for r in cells) + 2 for i in range(len(header))]

    def rule(ch: str) -> str:
        return "+" + "+".join(ch * w for w in widths) + "+"

    def row(r: list[str]) -> str:
        return "|" + "|".join(f" {c:<{w - 1}}" for c, w in zip(r, widths, strict=True)) + "|"
    out = [rule("-"), row(cells[0]), rule("=")]
    for r in cells[1:]:
        out += [row(r), rule("-")]
    return out


def release_rst(guide: ReleaseGuide) -> str:
    title = line(f"Performance Guide {guide.release}")
    out = ["=" * len(title), title, "=" * len(title), ""]
    out += [line(f"Boards: {', '.join(guide.columns)}."), ""]
    for name, why in guide.missing.items():
        out += [f".. note:: {line(name)}: missing ({line(why)})", ""]
    if guide.modules:
        out += [f"**{MODULES_LEAD}**", "", *_grid(MODULES_HEADER, guide.modules), "",
                f"Table:  {MODULES}", ""]
    for section, tables in guide.sections.items():
        out += [section, "-" * len(section), ""]
        for t in tables:
            sub = line(f"{t.step}: {t.title}" if t.title and t.step else (t.title or t.step))
            directive = f".. csv-table:: {line(t.title)}" if t.title else ".. csv-table::"
            out += [sub, "^" * len(sub), "", directive, f"   :header: {csv_row(t.header)}", ""]
            out += [f"   {csv_row(r)}" for r in t.rows] + [""]
    return "\n".join(out)


def release_md(guide: ReleaseGuide) -> str:
    out = [f"# Performance Guide {md(guide.release)}", "",
           f"Boards: {md(', '.join(guide.columns))}.", ""]
    out += [f"> **{md(name)}: missing** ({md(why)})" for name, why in guide.missing.items()]
    if guide.modules:
        out += ["", f"**{MODULES_LEAD}**", "", md_row(MODULES_HEADER), "|---|---|"]
        out += [md_row(r) for r in guide.modules] + ["", f"Table: {MODULES}"]
    for section, tables in guide.sections.items():
        out += ["", f"## {section}", ""]
        for t in tables:
            out += [f"### {md(t.step)}: {md(t.title)}" if t.title and t.step
                    else f"### {md(t.title or t.step)}",
                    "", md_row(t.header), "|" + "---|" * len(t.header)]
            out += [md_row(r) for r in t.rows]
    return "\n".join(out) + "\n"


def _mean(text: str) -> float | None:
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return None


def _bars(t: GuideTable, columns: list[str]) -> str:
    """Each row's board values as bars relative to the row's largest, so boards compare at a
    glance across rows of different units; the numbers stay in the table."""
    nkeys = key_columns(t.header)
    lines = []
    for row in t.rows[:40]:
        values = [(board_of(h)[0], _mean(c)) for h, c in zip(t.header[nkeys:], row[nkeys:], strict=False)]
        top = max((v for _, v in values if v is not None), default=None)
        if not top or top <= 0:
            continue
        bars = "".join(
            f'<div class="bar" title="{_html.escape(b)}: {v:g}" style="width:{100 * v / top:.1f}%;'
            f'background:var(--c{columns.index(b) % 8 if b in columns else 0})"></div>'
            for b, v in values if v is not None and v >= 0)
        lines.append(f'<tr><td>{_html.escape(" ".join(row[:nkeys]))}</td>'
                     f'<td class="bars">{bars}</td></tr>')
    return f'<table class="plot">{"".join(lines)}</table>' if lines else ""


def release_html(guide: ReleaseGuide) -> str:
    esc = _html.escape
    legend = "".join(f'<span class="key" style="background:var(--c{i % 8})"></span>{esc(c)} '
                     for i, c in enumerate(guide.columns))
    body = [f"<h1>Performance Guide {esc(guide.release)}</h1>", f"<p>Boards: {legend}</p>"]
    body += [f'<p class="missing"><b>{esc(n)}: missing</b> ({esc(w)})</p>'
             for n, w in guide.missing.items()]
    if guide.modules:
        body.append(f"<p><b>{esc(MODULES_LEAD)}</b></p><table class=\"modules\"><caption>"
                    f"{MODULES}</caption><tr>" + "".join(f"<th>{h}</th>" for h in MODULES_HEADER)
                    + "</tr>" + "".join(f"<tr><td>{esc(n)}</td><td>{esc(d)}</td></tr>"
                                        for n, d in guide.modules) + "</table>")
    for section, tables in guide.sections.items():
        body.append(f"<h2>{esc(section)}</h2>")
        for t in tables:
            body.append(f"<h3>{esc(f'{t.step}: {t.title}' if t.title and t.step else t.title or t.step)}</h3>")
            body.append("<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in t.header) + "</tr>"
                        + "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>"
                                  for r in t.rows) + "</table>")
            body.append(_bars(t, guide.columns))
    colours = ";".join(f"--c{i}:{c}" for i, c in enumerate(
        ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")))
    style = (f":root{{{colours}}} body{{font-family:sans-serif;max-width:1200px;margin:auto}}"
             "table{border-collapse:collapse;margin:.5em 0} td,th{border:1px solid #ccc;"
             "padding:2px 6px;font-size:13px} table.plot td{border:none} td.bars{width:480px}"
             ".bar{height:5px;margin:1px 0} .key{display:inline-block;width:12px;height:12px;"
             "margin:0 4px 0 12px} .missing{color:#b00}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>Performance Guide "
            f"{esc(guide.release)}</title><style>{style}</style></head><body>"
            + "\n".join(body) + "</body></html>\n")


@dataclass(frozen=True)
class ColumnChanges:
    column: str
    comparisons: list[Comparison]
    missing: str = ""              # why the column could not be compared
    software: tuple[str, str] = ("", "")   # what the board booted: previously, now

    @property
    def software_changed(self) -> bool:
        return self.software[0] != self.software[1]


def booted(doc: dict[str, Any] | None) -> str:
    """What a run's board booted, as a person compares two releases: the software set's name
    and kernel digest (or the board's own image) and the kernel release it reported."""
    prov = (doc or {}).get("provenance") or {}
    software = prov.get("software") or {}
    kernel = (software.get("kernel") or {}).get("sha256", "")
    what = f"{software.get('name') or 'software'} (kernel {kernel[:12]})" if software else \
        "the board's own image"
    release = prov.get("kernelRelease") or ""
    return f"{what}, Linux {release}" if release else what


def release_changes(previous: Sequence[Column], current: Sequence[Column],
                    policy: RegressionPolicy | None = None) -> list[ColumnChanges]:
    """Per column (matched by name) and metric: the previous release's value, this one's, the
    change and the regression rule's verdict (Mann-Whitney over the iterations with the
    per-family thresholds), worst regressions first."""
    before = {c.name: c for c in previous}
    out = []
    for col in current:
        prev = before.get(col.name)
        if col.doc is None or prev is None or (prev.doc is None and prev.summary is None):
            why = (col.missing or "no result") if col.doc is None else (
                "not in the previous release" if prev is None else
                f"missing in the previous release ({prev.missing or 'no result'})")
            out.append(ColumnChanges(col.name, [], why))
            continue
        base, base_dir = (prev.summary, {}) if prev.summary is not None else \
            samples_by_metric_name(prev.doc or {})
        cur, cur_dir = samples_by_metric_name(col.doc)
        software = (booted(prev.doc) if prev.doc else "", booted(col.doc)) \
            if prev.doc else ("", "")
        out.append(ColumnChanges(col.name, compare(base, cur, {**base_dir, **cur_dir}, policy),
                                 software=software))
    return out


def changes_md(release: str, previous: str, changes: Sequence[ColumnChanges],
               rule: str) -> str:
    previous, release = md(previous), md(release)
    out = [f"# Changes from {previous} to {release}", "", md(rule), ""]
    for ch in changes:
        out += [f"## {md(ch.column)}", ""]
        if ch.missing:
            out += [f"Not compared: {md(ch.missing)}.", ""]
            continue
        if ch.software_changed:
            out += [f"**The board booted other software**: {md(ch.software[0])} in {previous}, "
                    f"{md(ch.software[1])} in {release}.", ""]
        elif ch.software[1]:
            out += [f"Same software in both: {md(ch.software[1])}.", ""]
        out += [f"| Metric | {previous} | {release} | Change | Verdict |", "|---|---|---|---|---|"]
        out += [md_row((c.key, c.baseline.display, c.current.display, f"{c.change:+.1%}",
                        c.verdict)) for c in ch.comparisons] + [""]
    return "\n".join(out)


def changes_html(release: str, previous: str, changes: Sequence[ColumnChanges],
                 rule: str) -> str:
    esc = _html.escape
    body = [f"<h1>Changes from {esc(previous)} to {esc(release)}</h1>", f"<p>{esc(rule)}</p>"]
    for ch in changes:
        body.append(f"<h2>{esc(ch.column)}</h2>")
        if ch.missing:
            body.append(f"<p>Not compared: {esc(ch.missing)}.</p>")
            continue
        if ch.software_changed:
            body.append(f"<p><b>The board booted other software</b>: {esc(ch.software[0])} in "
                        f"{esc(previous)}, {esc(ch.software[1])} in {esc(release)}.</p>")
        body.append(f"<table><tr><th>Metric</th><th>{esc(previous)}</th><th>{esc(release)}</th>"
                    "<th>Change</th><th>Verdict</th></tr>" + "".join(
                        f'<tr class="{c.verdict}"><td>{esc(c.key)}</td><td>{esc(c.baseline.display)}'
                        f"</td><td>{esc(c.current.display)}</td><td>{c.change:+.1%}</td>"
                        f"<td>{c.verdict}</td></tr>" for c in ch.comparisons) + "</table>")
    style = ("body{font-family:sans-serif;max-width:1200px;margin:auto} table{border-collapse:"
             "collapse} td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px} "
             "tr.regressed{background:#fdd} tr.improved{background:#dfd}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>Changes {esc(release)}"
            f"</title><style>{style}</style></head><body>" + "\n".join(body) + "</body></html>\n")
