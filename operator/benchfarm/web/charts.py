"""SVG charts drawn here (no script, no CDN): a metric's history, one point per run. Pure.

Each run is a point at its mean with its min-max band (the samples it measured), in time order;
each point is a link to the run's page; a change point is a dashed line before the first run after
it, coloured by direction (regression red, improvement green). Legends sit above the plot area,
never on the data.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from html import escape
from typing import Any

from benchfarm.report.svg import fmt, nice_ticks

W, H = 960, 380
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 44, 56      # the plot area's margins; the legend is in TOP


def history_svg(doc: dict[str, Any], unit: str, link: Callable[[str], str]) -> str:
    series = doc.get("series") or []
    if not series:
        return '<p class="empty">No runs in this series that you may see.</p>'
    lows = [min(p["samples"]) if p.get("samples") else p["mean"] for p in series]
    highs = [max(p["samples"]) if p.get("samples") else p["mean"] for p in series]
    ticks = nice_ticks(min(lows), max(highs))
    y0, y1 = ticks[0], ticks[-1]
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM
    n = len(series)

    def x(i: float) -> float:
        return LEFT + (pw / 2 if n == 1 else pw * (i + 0.5) / n)

    def y(v: float) -> float:
        return TOP + ph - (v - y0) / (y1 - y0) * ph

    out = [f'<svg class="history" viewBox="0 0 {W} {H}" role="img" '
           f'xmlns="http://www.w3.org/2000/svg" aria-label="history of {escape(unit)}">',
           f'<rect class="plot-area" x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}"/>']
    for t in ticks:
        out.append(f'<line class="grid" x1="{LEFT}" x2="{LEFT + pw}" y1="{y(t):.1f}" '
                   f'y2="{y(t):.1f}"/><text class="tick" x="{LEFT - 6}" y="{y(t) + 4:.1f}" '
                   f'text-anchor="end">{fmt(t)}</text>')
    out.append(f'<text class="axis" transform="translate(16 {TOP + ph / 2}) rotate(-90)" '
               f'text-anchor="middle">{escape(unit)}</text>')
    band = [f"{x(i):.1f},{y(h):.1f}" for i, h in enumerate(highs)] + \
        [f"{x(i):.1f},{y(lo):.1f}" for i, lo in reversed(list(enumerate(lows)))]
    if n > 1:
        out.append(f'<polygon class="band" points="{" ".join(band)}"/>')
        out.append('<polyline class="mean" points="' +
                   " ".join(f"{x(i):.1f},{y(p['mean']):.1f}" for i, p in enumerate(series)) + '"/>')
    label_every = max(1, math.ceil(n / 8))
    days = {str(p.get("time") or "")[:10] for p in series}
    for i, p in enumerate(series):
        if i % label_every == 0:        # the time of day too when the runs are of a few days
            when = str(p.get("time") or "").replace("T", " ")
            label = when[5:16] if len(days) <= 3 else when[:10]
            out.append(f'<text class="tick" x="{x(i):.1f}" y="{TOP + ph + 16}" '
                       f'text-anchor="middle">{escape(label)}</text>')
    index = {p["run"]: i for i, p in enumerate(series)}
    for cp in doc.get("changePoints") or []:
        if cp.get("run") not in index:
            continue
        i = index[cp["run"]]
        cx = (x(i - 1) + x(i)) / 2 if i > 0 else x(i) - pw / n / 2
        what = "regression" if cp.get("direction") == "regression" else "improvement"
        title = (f"{what} at {cp['run']} ({cp.get('software') or 'no build name'}): "
                 f"{cp.get('magnitude', 0):+.1f} %, p = {cp.get('pvalue', 0):.3g}"
                 + (f"; {cp['note']}" if cp.get("note") else ""))
        out.append(f'<g class="change-point {what}" data-run="{escape(cp["run"])}">'
                   f'<title>{escape(title)}</title>'
                   f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{TOP}" y2="{TOP + ph}"/>'
                   f'<text x="{cx + 4:.1f}" y="{TOP + 12}">{escape(cp.get("software") or what)}'
                   f'</text></g>')
    for i, p in enumerate(series):
        title = (f"{p['run']} {p.get('software') or ''} on {p.get('board') or '?'}: mean "
                 f"{fmt(p['mean'])} (min {fmt(lows[i])}, max {fmt(highs[i])}, "
                 f"{len(p.get('samples') or [])} samples)")
        out.append(f'<a href="{escape(link(p["run"]))}" class="point-link">'
                   f'<line class="whisker" x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{y(highs[i]):.1f}" '
                   f'y2="{y(lows[i]):.1f}"/>'
                   f'<circle class="point" data-run="{escape(p["run"])}" cx="{x(i):.1f}" '
                   f'cy="{y(p["mean"]):.1f}" r="5"><title>{escape(title)}</title></circle></a>')
    legend = [("mean", "mean of a run (a link to it)"), ("band", "min-max of its samples"),
              ("regression", "change point: regression"),
              ("improvement", "change point: improvement")]
    lx = LEFT
    out.append('<g class="legend">')
    for cls, text in legend:
        out.append(f'<rect class="key {cls}" x="{lx}" y="10" width="14" height="10"/>'
                   f'<text x="{lx + 18}" y="19">{escape(text)}</text>')
        lx += 24 + 7 * len(text)
    out.append("</g></svg>")
    return "".join(out)
