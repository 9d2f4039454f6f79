"""Statistics across iterations and boots, and the figures the seed guides print.

TI's guides write a repeated measurement as "785.15 (min 707.87, max 861.19)" and a single or
unanimous one as a plain number; `seed_format` produces exactly that.
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


def _fmt(value: float, digits: int) -> str:
    if math.isfinite(value) and value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.{digits}f}"


def seed_format(values: Sequence[float], digits: int = 2) -> str:
    """'785.15 (min 707.87, max 861.19)', or a plain number when every value agrees."""
    s = summarize(values)
    if s.min == s.max:
        return _fmt(s.mean, digits)
    return f"{s.mean:.{digits}f} (min {s.min:.{digits}f}, max {s.max:.{digits}f})"
