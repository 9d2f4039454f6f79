"""Is a run worse than its baseline? Per metric, aware of direction and of noise.

The rule (also printed in every comparison report):
- both sides have at least 3 samples: flag when a two-sided Mann-Whitney U test gives p < alpha
  (default 0.05) AND the means differ by more than the minimum effect (default 3 %) in the worse
  direction;
- the baseline is only a summary (a vendor's "mean (min, max)" or a plain number): flag when the
  new mean lies outside the baseline's [min, max] widened by the tolerance (default 5 %), on the
  worse side.
Both thresholds can be set per metric family (a name prefix such as "cyclictest" or "lat_").
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from benchfarm.api.labpolicy import LabPolicySpec, RegressionThresholds
from benchfarm.api.outcomes import Verdict
from benchfarm.core.statistics.stats import figure, seed_format

LOWER_IS_BETTER_UNITS = {"us", "ns", "ms", "s", "cycles"}


@dataclass(frozen=True)
class Thresholds:
    alpha: float = 0.05
    min_effect: float = 0.03
    tolerance: float = 0.05


@dataclass
class RegressionPolicy:
    default: Thresholds = field(default_factory=Thresholds)
    families: dict[str, Thresholds] = field(default_factory=dict)

    def for_metric(self, name: str) -> Thresholds:
        best = ""
        for prefix in self.families:
            if name.startswith(prefix) and len(prefix) > len(best):
                best = prefix
        return self.families[best] if best else self.default

    def describe(self) -> str:
        d = self.default
        return (f"Rule: with >= 3 samples on both sides, a metric regresses when Mann-Whitney U "
                f"p < {d.alpha} and the mean is worse by more than {d.min_effect:.0%}; against a "
                f"summary baseline, when the new mean is outside the baseline's [min, max] "
                f"widened by {d.tolerance:.0%} on the worse side.")


@dataclass(frozen=True)
class Sample:
    """One side of a comparison: raw values, or a summary (mean, min, max) from a guide."""

    values: tuple[float, ...] = ()
    mean: float | None = None
    min: float | None = None
    max: float | None = None

    @classmethod
    def of(cls, values: Sequence[float]) -> Sample:
        vals = tuple(float(v) for v in values)
        return cls(vals, statistics.fmean(vals), min(vals), max(vals))

    @classmethod
    def summary(cls, mean: float, lo: float, hi: float) -> Sample:
        return cls((), mean, lo, hi)

    @property
    def display(self) -> str:
        if self.values:
            return seed_format(self.values)
        if self.mean is None or self.min is None or self.max is None:
            return "-"          # an empty side: nothing to show
        return figure(self.mean, self.min, self.max)


@dataclass(frozen=True)
class Comparison:
    key: str
    baseline: Sample
    current: Sample
    higher_is_better: bool
    change: float             # relative change of the mean, signed (+ = larger)
    verdict: str              # a Verdict
    evidence: str

    @property
    def worse_by(self) -> float:
        return -self.change if self.higher_is_better else self.change


def regression_policy(policy: LabPolicySpec) -> RegressionPolicy:
    """The lab's rule (LabPolicy spec.regression) for sessions and campaigns alike."""
    rules = policy.regression

    def thresholds(t: RegressionThresholds) -> Thresholds:
        return Thresholds(alpha=t.alpha, min_effect=t.minEffect, tolerance=t.tolerance)
    return RegressionPolicy(thresholds(rules.default),
                            {k: thresholds(v) for k, v in rules.families.items()})


def higher_is_better_for(unit: str) -> bool:
    return unit not in LOWER_IS_BETTER_UNITS


def unit_of(key: str) -> str:
    """The unit of a metric named 'NAME (UNIT)' ("" without one)."""
    return key.rpartition(" (")[2].rstrip(")") if key.endswith(")") and " (" in key else ""


def compare_metric(key: str, baseline: Sample, current: Sample, higher_is_better: bool,
                   th: Thresholds) -> Comparison:
    assert baseline.mean is not None and current.mean is not None
    change = (current.mean - baseline.mean) / abs(baseline.mean) if baseline.mean else 0.0
    worse = -change if higher_is_better else change
    if len(baseline.values) >= 3 and len(current.values) >= 3:
        if set(baseline.values) == set(current.values) and len(set(current.values)) == 1:
            p = 1.0
        else:
            from scipy.stats import mannwhitneyu  # lazily: 1.4 s of imports
            p = float(mannwhitneyu(baseline.values, current.values, alternative="two-sided").pvalue)
        significant = p < th.alpha
        if significant and worse > th.min_effect:
            verdict = Verdict.regressed
        elif significant and -worse > th.min_effect:
            verdict = Verdict.improved
        else:
            verdict = Verdict.unchanged
        evidence = f"Mann-Whitney p={p:.3g}, change {change:+.1%}"
    else:
        lo = baseline.min if baseline.min is not None else baseline.mean
        hi = baseline.max if baseline.max is not None else baseline.mean
        lo_w, hi_w = lo - abs(lo) * th.tolerance, hi + abs(hi) * th.tolerance
        if (current.mean < lo_w and higher_is_better) or (current.mean > hi_w and not higher_is_better):
            verdict = Verdict.regressed
        elif (current.mean > hi_w and higher_is_better) or (current.mean < lo_w and not higher_is_better):
            verdict = Verdict.improved
        else:
            verdict = Verdict.unchanged
        evidence = f"mean {current.mean:.4g} vs baseline range [{lo_w:.4g}, {hi_w:.4g}]"
    return Comparison(key, baseline, current, higher_is_better, change, verdict, evidence)


def compare(baseline: Mapping[str, Sample], current: Mapping[str, Sample],
            direction: Mapping[str, bool], policy: RegressionPolicy | None = None) -> list[Comparison]:
    """Compare every metric present on both sides; worst regressions first."""
    policy = policy or RegressionPolicy()
    out = []
    for key in current:
        if key not in baseline:
            continue
        name, _, unit = key.rpartition(" (")
        hib = direction.get(key, higher_is_better_for(unit.rstrip(")")))
        out.append(compare_metric(key, baseline[key], current[key], hib, policy.for_metric(name)))
    order: dict[str, int] = {Verdict.regressed: 0, Verdict.improved: 2, Verdict.unchanged: 1}
    return sorted(out, key=lambda c: (order[c.verdict], -c.worse_by))


def worst_offenders(comparisons: Sequence[Comparison], n: int = 3) -> str:
    bad = [c for c in comparisons if c.verdict == Verdict.regressed][:n]
    return "; ".join(f"{c.key} {c.change:+.1%} ({c.baseline.display} -> {c.current.display})"
                     for c in bad)
