"""Axes for the SVG charts benchfarm draws itself (the report's boot timeline, the dashboard's
histories): round tick values and their labels. Pure.

A chart of a few bars or points is a few dozen SVG elements; drawing it with matplotlib cost a
board session 0.1 s of CPU per run (a third of all it spends), on the host whose CPU the other
sessions and the scheduler need.
"""

from __future__ import annotations

import math


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About `count` round values (steps of 1, 2, 2.5 or 5 times a power of ten) from at most
    `lo` to at least `hi`."""
    if hi <= lo:
        lo, hi = lo - (abs(lo) * 0.05 or 1), hi + (abs(hi) * 0.05 or 1)
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step) * step
    ticks, t = [], first
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    if ticks[-1] < hi:
        ticks.append(round(t, 12))
    return ticks


def fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 10_000 else f"{v:.4g}"
