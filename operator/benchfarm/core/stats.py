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


def summarize(values: Sequence[float]) -> Summary:
    if not values:
        raise ValueError("no values to summarise")
    vals = [float(v) for v in values]
    return Summary(
        n=len(vals), mean=statistics.fmean(vals), median=statistics.median(vals),
        min=min(vals), max=max(vals), stddev=statistics.stdev(vals) if len(vals) > 1 else 0.0)


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
