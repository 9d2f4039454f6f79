"""Axes for the SVG charts benchfarm draws itself (the report's boot timeline, the dashboard's
histories): round tick values and their labels. Pure.

A chart of a few bars or points is a few dozen SVG elements; drawing it with matplotlib cost a
board session 0.1 s of CPU per run (a third of all it spends), on the host whose CPU the other
sessions and the scheduler need.

The values are a tenant's figures, so an axis takes any float: inf and nan, ±1e308, subnormals,
two values one unit in the last place apart. Ticks are computed as integer multiples of the step
(never by adding the step over and over, which stands still once the step is below the values'
float spacing), so there are at most `count + 4` of them, strictly increasing and finite.
"""

from __future__ import annotations

import math

# An axis's widest reach: the span of two ends past it overflows a float (1e308 - -1e308 is inf),
# and a chart then divides by it. Values past it are drawn at its edge.
LIMIT = 1e300
MAX_COUNT = 100
# Each step spans at least this many float spacings of the axis's largest end, so neighbouring
# ticks are distinct floats however narrow the values' spread.
_SPACINGS_PER_STEP = 8


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About `count` round values (steps of 1, 2, 2.5 or 5 times a power of ten) from at most
    `lo` to at least `hi`: finite, strictly increasing, at least two and at most `count + 4`.
    A non-finite end is clamped to ±LIMIT (nan to 0), an empty or too narrow span widened."""
    count = min(max(int(count), 1), MAX_COUNT)
    lo, hi = sorted((_finite(lo), _finite(hi)))
    if hi <= lo:
        pad = abs(lo) * 0.05 or 1.0
        lo, hi = lo - pad, hi + pad
    least = _SPACINGS_PER_STEP * count * math.ulp(max(abs(lo), abs(hi)))
    if hi - lo < least:
        mid = lo / 2 + hi / 2
        lo, hi = mid - least / 2, mid + least / 2
    raw = hi / count - lo / count          # (hi - lo) / count without overflowing
    exp = math.floor(math.log10(raw))
    sig, exp = next(((s, e) for s, e in ((1, exp), (2, exp), (25, exp - 1), (5, exp),
                                         (1, exp + 1)) if _value(s, e) >= raw), (1, exp + 2))
    step = _value(sig, exp)
    first, last = math.floor(lo / step), math.ceil(hi / step)
    last = min(last, first + count + 2)    # (hi - lo) / step <= count: a bound, never reached
    ticks = [_value(k * sig, exp) for k in range(first, last + 1)]
    if ticks[0] > lo:                      # lo / step rounded up to a whole number
        ticks.insert(0, _value((first - 1) * sig, exp))
    if ticks[-1] < hi:
        ticks.append(_value((last + 1) * sig, exp))
    return ticks


def _finite(v: float) -> float:
    return 0.0 if math.isnan(v) else min(max(v, -LIMIT), LIMIT)


def _value(mantissa: int, exp: int) -> float:
    """mantissa * 10**exp, correctly rounded (3 * 10**-1 is 0.3, not 0.30000000000000004)."""
    return float(mantissa * 10 ** exp) if exp >= 0 else mantissa / 10 ** -exp


def fmt(v: float) -> str:
    """A tick's or a figure's label: grouped digits from 10,000, exponent notation past 1e21."""
    if math.isfinite(v) and 10_000 <= abs(v) < 1e21:
        return f"{v:,.0f}"
    return f"{v:.4g}" if abs(v) < 10_000 else f"{v:.6g}"
