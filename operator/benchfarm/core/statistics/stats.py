"""Statistics across iterations and boots, and the figures the seed guides print.

TI's guides write a repeated measurement as "785.15 (min 707.87, max 861.19)" and a single or
unanimous one as a plain number; `seed_format` produces exactly that, and keeps significant
figures where two decimals would lose them (`figure`: "0.122 (min 0.120, max 0.123)").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    median: float
    min: float
    max: float
    stddev: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


HUGE = 2.0 ** 1000      # above this a sum of two values, or a middle of two, may overflow
SCALE = 2.0 ** 512      # what such values are divided by: their sums and squares stay finite


def summarize(values: Sequence[float]) -> Summary:
    """n, mean, median, min, max and sample standard deviation. Figures near the float's limit
    (1e308: a board prints what it likes) are summarised scaled by a power of two, exactly, so
    no sum overflows: the mean and median, between min and max, are always finite; a spread
    wider than the largest float is inf. An infinity or NaN among the values (no parser yields
    one) gives IEEE arithmetic's mean and a NaN spread, never an exception."""
    if not values:
        raise ValueError("no values to summarise")
    vals = [float(v) for v in values]
    n = len(vals)
    if not all(map(math.isfinite, vals)):
        return Summary(n=n, mean=sum(vals) / n, median=statistics.median(vals), min=min(vals),
                       max=max(vals), stddev=math.nan if n > 1 else 0.0)
    lo, hi = min(vals), max(vals)
    scale = SCALE if max(-lo, hi) > HUGE else 1.0
    scaled = [v / scale for v in vals]     # exact but for values below 2^-562: nil beside 2^1000
    return Summary(
        n=n, mean=_between(statistics.fmean(scaled) * scale, lo, hi), median=_median(vals),
        min=lo, max=hi, stddev=statistics.stdev(scaled) * scale if n > 1 else 0.0)


def _between(value: float, lo: float, hi: float) -> float:
    """A mean as computed, held where the true one is (rounding may put it an ulp outside)."""
    return min(max(value, lo), hi)


def _median(vals: list[float]) -> float:
    """The middle value, or the midpoint of the middle two without their sum (which overflows
    near 1e308)."""
    ordered = sorted(vals)
    half = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[half]
    a, b = ordered[half - 1], ordered[half]
    mid = (a + b) / 2 if (a < 0) != (b < 0) else a + (b - a) / 2
    return _between(mid, a, b)


SIGNIFICANT = 3        # figures kept of a value below 0.1 (0.00308, not 0.00)
MAX_DECIMALS = 9


def decimals_for(*values: float) -> int:
    """How many decimals a figure is written with: two, as the guides' tables do (785.15, 5.12,
    0.75); for a value below 0.1 as many as keep SIGNIFICANT figures of the smallest (0.00308);
    then more, up to MAX_DECIMALS, while values that differ would print alike (0.1203, 0.1217
    and 0.1231 s: "0.122 (min 0.120, max 0.123)", never "0.12 (min 0.12, max 0.12)")."""
    finite = [abs(v) for v in values if math.isfinite(v) and v != 0]
    digits = 2
    if finite and min(finite) < 0.1:
        digits = min(MAX_DECIMALS, SIGNIFICANT - 1 - math.floor(math.log10(min(finite))))
    distinct = {v for v in values if math.isfinite(v)}
    while digits < MAX_DECIMALS and len({f"{v:.{digits}f}" for v in distinct}) < len(distinct):
        digits += 1
    return max(2, digits)


def figure(mean: float, lo: float, hi: float) -> str:
    """'785.15 (min 707.87, max 861.19)', or the mean alone when min and max agree, with
    `decimals_for` decimals."""
    if lo == hi:
        return _fmt(mean, decimals_for(mean))
    d = decimals_for(mean, lo, hi)
    return f"{mean:.{d}f} (min {lo:.{d}f}, max {hi:.{d}f})"


def _fmt(value: float, digits: int) -> str:
    if math.isfinite(value) and value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.{digits}f}"


def seed_format(values: Sequence[float]) -> str:
    """'785.15 (min 707.87, max 861.19)', or a plain number when every value agrees (`figure`)."""
    s = summarize(values)
    return figure(s.mean, s.min, s.max)
