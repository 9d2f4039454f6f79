"""A bisection step's verdict from its interleaved A/B pairs: adaptive, not a fixed count.

Each pair is one iteration of the reference (the good build) and one of the candidate, measured
back to back on the same board, so a drift of the board (its temperature, the host's load) hits
both alike. The step's effect is the mean of the pairs' differences, relative to the reference's
mean and signed so that worse is positive; its 95 % confidence interval is Student's t over the
pairs' differences (`scipy.stats.ttest_1samp`). Against the bisection's threshold T:
- bad: the effect is at least T and the whole interval lies above T/2;
- good: the whole interval lies below T, and not above T/2 (an improvement is good);
- unclear: the whole interval lies between T/2 and T (a real effect, smaller than the threshold);
- otherwise the step measures another pair, up to its bound; at the bound it is unclear.
A step stops as soon as its interval allows one verdict, which on a quiet board is after its
first few pairs and on a noisy one takes as many as the noise needs (`benchmarks/bisection_bench.py`
compares this with a fixed count per step). At least `min_pairs` (3) are measured: an interval
over two pairs is too wide to stop on, and a deterministic board's first pair may be cold.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from benchfarm.api.outcomes import StepVerdict

MIN_PAIRS = 3


@dataclass(frozen=True)
class Judgement:
    """What a step's pairs show so far. `verdict` None: measure another pair."""

    verdict: StepVerdict | None
    pairs: int
    effect: float            # relative, worse is positive (0.05: 5 % worse than the reference)
    low: float               # the effect's 95 % confidence interval
    high: float

    def figures(self) -> tuple[float | None, list[float | None]]:
        """The effect and its interval as a status carries them (None: infinite or none)."""
        return _rounded(self.effect), [_rounded(self.low), _rounded(self.high)]

    def as_dict(self) -> dict[str, object]:
        effect, ci95 = self.figures()
        return {"verdict": self.verdict.value if self.verdict else None, "pairs": self.pairs,
                "effect": effect, "ci95": ci95}

    def describe(self) -> str:
        """`+5.2 % (95 % CI +4.8 % to +5.6 %, 4 pairs)`: worse is positive."""
        return (f"{self.effect:+.1%} (95 % CI {self.low:+.1%} to {self.high:+.1%}, "
                f"{self.pairs} pairs)")


def percent(value: float | None) -> str:
    """An effect as a status's reader sees it: `+12.2%`, or `?` for none."""
    return "?" if value is None else f"{value:+.1%}"


def _rounded(value: float) -> float | None:
    return None if math.isinf(value) or math.isnan(value) else round(value, 6)


def effect(pairs: Sequence[tuple[float, float]], higher_is_better: bool) -> tuple[float, float, float]:
    """(effect, low, high) of (reference, candidate) pairs: the mean difference relative to the
    reference's mean, worse positive, with its 95 % interval (infinite under two pairs)."""
    scale = abs(statistics.fmean(a for a, _ in pairs))
    if scale == 0:       # a reference of 0: no relative effect to speak of
        return math.nan, -math.inf, math.inf
    sign = -1.0 if higher_is_better else 1.0
    diffs = [sign * (b - a) / scale for a, b in pairs]
    mean = statistics.fmean(diffs)
    if len(diffs) < 2:
        return mean, -math.inf, math.inf
    if max(diffs) - min(diffs) <= 1e-12 * max(1.0, abs(mean)):   # a deterministic board: exact
        return mean, mean, mean
    from scipy.stats import ttest_1samp  # here: scipy.stats costs a session 1.4 s to import
    ci = ttest_1samp(diffs, 0.0).confidence_interval(0.95)
    return mean, float(ci.low), float(ci.high)


def judge(pairs: Sequence[tuple[float, float]], higher_is_better: bool, threshold: float,
          max_pairs: int, min_pairs: int = MIN_PAIRS) -> Judgement:
    """The step's verdict after `pairs`, or None (with the figures so far) to measure another."""
    if threshold <= 0:
        raise ValueError(f"a bisection's threshold is a positive fraction, not {threshold}")
    if not pairs:
        return Judgement(None, 0, math.nan, -math.inf, math.inf)
    mean, low, high = effect(pairs, higher_is_better)
    n, half = len(pairs), threshold / 2
    verdict: StepVerdict | None = None
    if math.isnan(mean):
        verdict = StepVerdict.unclear
    elif n >= min_pairs:
        if mean >= threshold and low > half:
            verdict = StepVerdict.bad
        elif high < threshold and low <= half:
            verdict = StepVerdict.good
        elif high < threshold:
            verdict = StepVerdict.unclear
    if verdict is None and n >= max_pairs:
        verdict = StepVerdict.unclear
    return Judgement(verdict, n, mean, low, high)
