"""A self-contained HTML report with plots: boot phases, the conditions' fused timeline
(report.timeline), cyclictest histogram, lat_mem_rd curve; its tables in the guides' shapes
(report.shapes) and what each step was measured under (report.conditions), like the Markdown
and RST reports.

Rendered with jinja2; plots embedded, so the one file uploaded next to the run is all a reader
needs: the boot timeline (every run has one) drawn here as inline SVG (a browser test reads its
colours and where its legend is), the others drawn with matplotlib (Agg, no display) as PNG data.
"""

from __future__ import annotations

import base64
import functools
import io
import math
from collections import defaultdict
from html import escape
from typing import Any

import jinja2
import re2

from benchfarm.report.conditions import EXCLUDED, HEADER, SIMULATED, step_tables
from benchfarm.report.shapes import shape
from benchfarm.report.svg import LIMIT, fmt, nice_ticks
from benchfarm.report.timeline import timeline


def _pyplot() -> Any:
    """matplotlib's pyplot on Agg (PNG, no display), whatever backend the host has."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    _pyplot().close(fig)
    return base64.b64encode(buf.getvalue()).decode()


_HIST_BUCKET = re2.compile(r"^cyclictest-hist-(\d{1,9})us$")
_MEM_SIZE = re2.compile(r"-sz(\d{1,18})(k?)$")
BOOT_STAGES = ("first-byte", "kernel", "init", "userspace", "prompt")
# One colour per stage, the same in every boot's bar and in the legend.
STAGE_COLOURS = dict(zip(BOOT_STAGES, ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"),
                         strict=True))


# the boot timeline's geometry (SVG user units): bars, then the margins around the plot area
BAR, GAP = 18, 9
LEFT, RIGHT, TOP, BOTTOM, WIDTH = 64, 16, 34, 44, 720


def boot_plot(doc: dict[str, Any]) -> str | None:
    """The boot timeline as inline SVG: a bar per boot, a segment per stage in the stage's own
    colour, the legend above the axes (never on a bar). Each segment's SVG id is
    `boot<N>-<stage>`, the legend's `boot-legend`, the plot area's `boot-axes`.

    Drawn here, not with matplotlib: it is a few rectangles, and matplotlib took 0.1 s of CPU per
    run (`report.svg`)."""
    events = doc.get("bootEvents") or []
    if not events:
        return None
    order = [e for e in BOOT_STAGES if any(e in ev for ev in events)]
    ends = [float(ev[name]) for ev in events for name in order if name in ev]
    ticks = nice_ticks(min([0.0, *ends]), max([0.0, *ends]))
    lo, hi = ticks[0], ticks[-1]
    pw = WIDTH - LEFT - RIGHT
    ph = len(events) * (BAR + GAP) + GAP
    height = TOP + ph + BOTTOM

    def x(v: float) -> float:
        return LEFT + (v - lo) / (hi - lo) * pw

    def box(x0: float, y0: float, w: float, h: float, colour: str) -> str:
        return f'<path d="M {x0:.2f} {y0:.2f} h {w:.2f} v {h:.2f} h {-w:.2f} Z" ' \
               f'style="fill: {colour}"/>'

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="boot timeline" '
           f'font-family="sans-serif" font-size="11">',
           f'<g id="boot-axes"><path d="M {LEFT} {TOP} h {pw} v {ph} h {-pw} Z" '
           f'style="fill: #ffffff; stroke: #000000"/></g>']
    legend, lx = ['<g id="boot-legend">'], LEFT
    for name in order:
        legend.append(box(lx, 8, 12, 12, STAGE_COLOURS[name]))
        legend.append(f'<text x="{lx + 16}" y="18">{escape(name)}</text>')
        lx += 24 + 7 * len(name)
    out += [*legend, "</g>"]
    for i, ev in enumerate(events):
        y0 = TOP + GAP + i * (BAR + GAP)
        start = 0.0
        for name in order:
            if name in ev:
                a, b = sorted((x(start), x(float(ev[name]))))
                out.append(f'<g id="boot{i + 1}-{name}">'
                           f'{box(a, y0, b - a, BAR, STAGE_COLOURS[name])}</g>')
                start = float(ev[name])
        out.append(f'<text x="{LEFT - 6}" y="{y0 + BAR / 2 + 4}" text-anchor="end">'
                   f'boot {i + 1}</text>')
    for t in ticks:
        out.append(f'<line x1="{x(t):.2f}" y1="{TOP + ph}" x2="{x(t):.2f}" y2="{TOP + ph + 4}" '
                   f'stroke="#000000"/><text x="{x(t):.2f}" y="{TOP + ph + 16}" '
                   f'text-anchor="middle">{fmt(t)}</text>')
    out.append(f'<text x="{LEFT + pw / 2}" y="{height - 8}" text-anchor="middle">seconds since '
               f'power-on (each bar ends when that marker appeared)</text></svg>')
    return "".join(out)


HIST_BINS = 2000   # the histogram's widest drawing: more buckets are summed into as many bins


def cyclictest_plot(doc: dict[str, Any]) -> str | None:
    """The histogram's mean samples per bucket as one filled step line: a run's buckets can be a
    million, and a bar each took matplotlib 30 s for 20,000 of them."""
    buckets: dict[int, float] = defaultdict(float)
    for s in doc.get("series", []):
        if (m := _HIST_BUCKET.match(s["name"])) and s.get("values"):
            mean = sum(s["values"]) / len(s["values"])
            if 0 < mean < LIMIT:     # nor nan, nor inf, nor what overflows a log scale
                buckets[int(m.group(1))] += mean
    if not buckets:
        return None
    lo, hi = min(buckets), max(buckets)
    width = -(-(hi - lo + 1) // HIST_BINS)         # bucket width in us, at least 1
    bins = [0.0] * ((hi - lo) // width + 1)
    for us, samples in buckets.items():
        bins[(us - lo) // width] += samples
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.stairs(bins, [lo - 0.5 + i * width for i in range(len(bins) + 1)], fill=True,
              baseline=min(b for b in bins if b > 0) / 2)   # log scale: below every bar
    ax.set_yscale("log")
    ax.set_xlabel("latency (us)" if width == 1 else f"latency (us, {width} us per bin)")
    ax.set_ylabel("samples (mean per iteration)")
    return _png(fig)


def lat_mem_rd_plot(doc: dict[str, Any]) -> str | None:
    points = []
    for s in doc.get("series", []):
        if s["name"].startswith("lat_mem_rd-") and s.get("values"):
            m = _MEM_SIZE.search(s["name"])
            mean = sum(s["values"]) / len(s["values"])
            if m and math.isfinite(mean):
                kb = float(m.group(1)) if m.group(2) else float(m.group(1)) / 1000
                points.append((kb, mean))
    if len(points) < 2:
        return None
    plt = _pyplot()
    points.sort()
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.plot([p[0] for p in points], [p[1] for p in points], marker=".")
    ax.set_xscale("log")
    ax.set_xlabel("array size (KB)")
    ax.set_ylabel("load latency (ns)")
    return _png(fig)


@functools.cache
def template() -> jinja2.Template:
    """The report's template, compiled once per process (a few tens of ms; the session server
    compiles it before it forks sessions)."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("benchfarm.report", "templates"),
                             autoescape=True)
    return env.get_template("report.html.j2")


def html(doc: dict[str, Any]) -> str:
    run = doc.get("run", {})
    shaped = shape(doc)
    steps = {step: [s for s in series if not s["name"].startswith("cyclictest-hist-")]
             for step, series in shaped.rest.items()}   # the histogram is plotted instead
    plots = [(title, kind, data) for title, kind, data in (
        ("Boot timeline", "svg", boot_plot(doc)),
        ("Measured under: power, frequency and temperature", "svg", timeline(doc)),
        ("cyclictest latency histogram", "png", cyclictest_plot(doc)),
        ("lat_mem_rd: latency against size", "png", lat_mem_rd_plot(doc))) if data]
    facts = [(k, run.get(v)) for k, v in (("Board", "board"), ("Device type", "deviceType"),
                                          ("Plan", "plan"), ("Iterations", "iterations"),
                                          ("Boot cycles", "bootCycles"), ("Kernel", "uname"),
                                          ("Result", "result")) if run.get(v) not in (None, "")]
    return template().render(
        run=run, facts=facts, boot=shaped.boot, plots=plots, steps=steps, tables=shaped.tables,
        evidence=doc.get("evidence") or {},
        comparison=doc.get("comparison"), conditions=step_tables(doc),
        conditions_header=HEADER, excluded=EXCLUDED, simulated=SIMULATED,
        failures=[r for r in doc.get("records", []) if r.get("error")])
