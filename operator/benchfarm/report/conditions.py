"""What each step was measured under, as the reports and the dashboard's run page show it: per
step a table of its attempts (valid or not, frequency and governor, the hottest zone, busy before,
throttle events, energy, average power), the invalid attempts with why (kept in the raw data,
excluded from the statistics) and a line summing up the valid iterations; built once here
(`step_tables`, from a metrics document) and written as Markdown and RST (`markdown_lines`,
`rst_lines`) or by a template (report.html, the dashboard's run page).

The values came from the board, the reasons too: every cell is text the format's escaping takes
(report.escape), a reason is cut (core.statistics.conditions), so a report stays linear in the
attempts it shows. RST gets a list-table, not a csv-table: a report read back as a guide
(core.guides.guide reads every csv-table) takes no iteration for a metric.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from benchfarm.core.statistics import conditions as cond
from benchfarm.report.escape import md, md_row, rst_text
from benchfarm.report.svg import fmt

HEADER = ["Iteration", "Attempt", "Valid", "Frequency (MHz)", "Governor",
          "Temperature max (°C)", "Busy before", "Throttle events", "Energy (J)",
          "Average power (W)"]
EXCLUDED = ("Invalid attempts are kept in the raw data and excluded from the statistics; an "
            "iteration that got no valid attempt counts no value.")
SIMULATED = ("Frequency, governor and temperature are simulated: this device type's board "
             "shows a stand-in the lab drives, not a SoC's own.")
MAX_GOVERNORS = 4
MAX_TEXT = 64          # a governor's or a rail's name, as shown
MAX_RAILS = 16


@dataclass(frozen=True)
class StepTable:
    step: str
    simulated: bool
    summary: str                          # the valid iterations in one line
    rows: list[list[str]]                 # one per attempt, HEADER's columns
    invalid: list[tuple[str, str]]        # (which attempt, why), in the rows' order


def _n(v: float | None, unit: str = "") -> str:
    return "n/a" if v is None else fmt(v) + unit


def _span(lo: float, hi: float, unit: str = "") -> str:
    return fmt(lo) + unit if fmt(lo) == fmt(hi) else f"{fmt(lo)}–{fmt(hi)}{unit}"


def _row(a: cond.Attempt) -> list[str]:
    freq = a.frequency_range
    return [f"{a.iteration}" + (" (warm-up)" if a.warmup else ""), str(a.retake + 1),
            ("yes" if a.valid else "no") if a.ok else "suite failed",
            "n/a" if freq is None else _span(*freq),
            ", ".join(g[:MAX_TEXT] for g in a.governors[:MAX_GOVERNORS]) or "n/a",
            _n(a.temperature_max), _n(None if a.busy_before is None else a.busy_before * 100,
                                      " %"),
            "n/a" if a.throttle_events is None else str(a.throttle_events),
            _n(a.energy_j), _n(a.average_w)]


def _which(a: cond.Attempt) -> str:
    raw = f", raw output {a.artifact}" if a.artifact else ""
    return f"iteration {a.iteration}, attempt {a.retake + 1}{raw}"


def summary_line(s: Mapping[str, Any]) -> str:
    """A step's conditions summary (core.statistics.conditions.step_summary) in words."""
    parts = [f"valid iterations: {s.get('validIterations', 0)} of {s.get('iterations', 0)}"]
    if (f := s.get("frequencyMHz")) is not None:
        parts.append(f"frequency {_span(f['min'], f['max'], ' MHz')} (median "
                     f"{fmt(f['median'])})")
    if governors := s.get("governors"):
        parts.append("governor " + ", ".join(str(g)[:MAX_TEXT]
                                             for g in governors[:MAX_GOVERNORS]))
    if (t := s.get("temperatureC")) is not None:
        parts.append(f"temperature {_span(t['min'], t['max'], ' °C')}")
    if (b := s.get("busyBefore")) is not None:
        parts.append(f"busy before {_span(b['min'] * 100, b['max'] * 100, ' %')}")
    if s.get("throttleEvents"):
        parts.append(f"{s['throttleEvents']} throttle event(s)")
    if s.get("energyJ") is not None or s.get("averageW") is not None:
        parts.append(f"energy {_n(s.get('energyJ'), ' J')}, average power "
                     f"{_n(s.get('averageW'), ' W')} (mean of the valid iterations)")
    rails = list((s.get("rails") or {}).items())[:MAX_RAILS]
    if rails:
        parts.append("per rail " + ", ".join(
            f"{str(name)[:MAX_TEXT]} {fmt(r['energyJ'])} J / {fmt(r['averageW'])} W"
            for name, r in rails))
    if s.get("invalidAttempts"):
        parts.append(f"{s['invalidAttempts']} invalid attempt(s), excluded from the statistics")
    return "; ".join(parts)


def step_tables(doc: Mapping[str, Any]) -> list[StepTable]:
    """Each step whose attempts recorded conditions, in step order."""
    records, retaken = (
        [r for r in v if isinstance(r, Mapping)] if isinstance(v := doc.get(key), list) else []
        for key in ("records", "retaken"))
    by_step: dict[str, list[cond.Attempt]] = {}
    for a in cond.attempts(records, retaken):
        by_step.setdefault(a.step, []).append(a)
    summaries = doc.get("conditions")
    simulated = isinstance(summaries, Mapping) and any(
        isinstance(s, Mapping) and bool(s.get("simulated")) for s in summaries.values())
    out = []
    for step, attempts in by_step.items():
        if not any(a.recorded for a in attempts):
            continue
        summary = cond.step_summary(attempts, simulated)
        out.append(StepTable(
            step, bool(summary["simulated"]), summary_line(summary),
            [_row(a) for a in attempts],
            [(_which(a), "; ".join(a.reasons) or "outside its envelope")
             for a in attempts if a.recorded and not a.valid]))
    return out


def markdown_lines(doc: Mapping[str, Any]) -> list[str]:
    tables = step_tables(doc)
    if not tables:
        return []
    lines = ["## Measured under", ""]
    for t in tables:
        lines += [f"### {md(t.step)}", "", md(t.summary) + ".", ""]
        if t.simulated:
            lines += [SIMULATED, ""]
        lines += [md_row(HEADER), "|" + "---|" * len(HEADER)] + [md_row(r) for r in t.rows]
        lines.append("")
        if t.invalid:
            lines += [EXCLUDED, ""] + [f"- {md(which)}: {md(why)}" for which, why in t.invalid]
            lines.append("")
    return lines


def rst_lines(doc: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for t in step_tables(doc):
        title = rst_text(f"Measured under: {t.step}")
        out += [title, "^" * len(title), "", rst_text(t.summary + "."), ""]
        if t.simulated:
            out += [rst_text(SIMULATED), ""]
        out += [".. list-table::", "   :header-rows: 1", ""]
        for row in (HEADER, *t.rows):
            out += [f"   {'*' if i == 0 else ' '} - {rst_text(c) or 'n/a'}"
                    for i, c in enumerate(row)]
        out.append("")
        if t.invalid:
            out += [rst_text(EXCLUDED), ""]
            out += [f"- {rst_text(which)}: {rst_text(why)}" for which, why in t.invalid]
            out.append("")
    return out
