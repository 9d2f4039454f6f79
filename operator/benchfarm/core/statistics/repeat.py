"""Adaptive repetition: how many iterations a run needs, decided from what it measured so far.

A run with `spec.repeat` iterates until every headline metric's 95 % confidence interval
(Student's t, half-width t(0.975, n-1) * s / sqrt(n)) is within `relativeCI95` of its mean, at
least `minIterations` and at most `maxIterations` times. The decision depends only on the values
already checkpointed, so a resumed session takes the same decision. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

STABLE, AT_MAXIMUM = "stable", "maxIterations"


@dataclass(frozen=True)
class Interval:
    metric: str
    n: int
    mean: float
    half_width: float          # of the 95 % confidence interval, in the metric's unit

    @property
    def relative(self) -> float:
        if self.half_width == 0:
            return 0.0
        return math.inf if self.mean == 0 else self.half_width / abs(self.mean)

    def as_dict(self, target: float) -> dict[str, object]:
        return {"metric": self.metric, "n": self.n, "mean": round(self.mean, 6),
                "halfWidth95": round(self.half_width, 6),
                "relativeCI95": None if math.isinf(self.relative) else round(self.relative, 5),
                "withinTarget": self.relative <= target}


def interval(metric: str, values: Sequence[float]) -> Interval:
    n = len(values)
    mean = sum(values) / n if n else 0.0
    if n < 2:
        return Interval(metric, n, mean, math.inf)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    from scipy.stats import t as student_t  # here: scipy.stats costs a session 1.4 s to import
    return Interval(metric, n, mean, float(student_t.ppf(0.975, n - 1)) * sd / math.sqrt(n))


def decide(series: Mapping[str, Sequence[float]], target: float, done: int,
           min_iterations: int, max_iterations: int) -> str | None:
    """After `done` measured iterations: STABLE or AT_MAXIMUM to stop, None to go on."""
    if done >= max_iterations:
        return AT_MAXIMUM
    if done < min_iterations:
        return None
    if all(interval(k, v).relative <= target for k, v in series.items()):  # none: nothing to wait for
        return STABLE
    return None
