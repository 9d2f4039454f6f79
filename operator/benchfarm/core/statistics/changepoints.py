"""Where a metric's history moved: change points in a series of runs, judged by their samples.

Pure (no I/O): `benchfarm.history` feeds it one (metric, device type, plan) series ordered by
time, each run with every sample it measured. Two steps:
1. candidates: `ruptures.KernelCPD` with the linear kernel (least squares on the runs' means,
   the optimal segmentation by PELT, in C; a BIC-like penalty scaled by the series' own
   run-to-run noise, or at least the noise of a run's mean by its own samples) proposes where
   the mean shifts;
2. judgement by the runs' own noise, not one number per run: a candidate stands only when, over
   the runs between its neighbouring points, the two sides' samples differ (two-sided
   Mann-Whitney U, p < alpha) AND so do the runs' means (Welch's t-test, p < alpha: a shift the
   runs' repeated samples call certain but that lies within how much whole runs vary from one
   another is not a change), AND the shift is at least `min_effect`. The weakest candidate that
   fails is dropped and the others judged again with wider sides, until all stand.
The p-value reported is the larger of the two tests'. A point's direction (regression or
improvement) follows the metric's direction (higher or lower is better).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import ruptures
from scipy.stats import mannwhitneyu, ttest_ind

MIN_SIZE = 3          # runs on each side of a point, at least
ALPHA = 0.001
MIN_EFFECT = 0.01     # 1 % of the mean before the point


@dataclass(frozen=True)
class ChangePoint:
    index: int            # the first run after the change (0-based position in the series)
    magnitude: float      # % change of the mean, after against before
    pvalue: float
    direction: str        # "regression" | "improvement"


def _means(runs: Sequence[Sequence[float]]) -> list[float]:
    return [statistics.fmean(r) for r in runs]


def _candidates(runs: Sequence[Sequence[float]], means: list[float]) -> list[int]:
    n = len(means)
    y = np.asarray(means, dtype=float)
    diffs = np.diff(y)
    # run-to-run noise from successive differences (a step inflates only one of them), never
    # below what the runs' own samples say a mean is good for
    sigma = float(np.median(np.abs(diffs - np.median(diffs)))) * 1.4826 / math.sqrt(2)
    within = statistics.median(statistics.stdev(r) / math.sqrt(len(r)) if len(r) > 1 else 0.0
                               for r in runs)
    sigma = max(sigma, within, 1e-6 * abs(float(np.median(y))), 1e-12)
    algo = ruptures.KernelCPD(kernel="linear", min_size=MIN_SIZE).fit(y.reshape(-1, 1))
    ends = algo.predict(pen=2.0 * math.log(n) * sigma * sigma)
    return [int(e) for e in ends if 0 < e < n]


def _judge(runs: Sequence[Sequence[float]], means: list[float], lo: int, k: int, hi: int
           ) -> tuple[float, float]:
    """(p-value, relative change) of a point at k between the runs lo..k-1 and k..hi-1."""
    before = [v for r in runs[lo:k] for v in r]
    after = [v for r in runs[k:hi] for v in r]
    p_samples = float(mannwhitneyu(before, after, alternative="two-sided").pvalue)
    m_before, m_after = means[lo:k], means[k:hi]
    if statistics.pstdev(m_before) == 0 and statistics.pstdev(m_after) == 0:
        p_means = 0.0 if statistics.fmean(m_before) != statistics.fmean(m_after) else 1.0
    else:
        p_means = float(ttest_ind(m_before, m_after, equal_var=False).pvalue)
    base = statistics.fmean(m_before)
    change = (statistics.fmean(m_after) - base) / abs(base) if base else math.inf
    return max(p_samples, p_means if not math.isnan(p_means) else 1.0), change


def detect(runs: Sequence[Sequence[float]], higher_is_better: bool, *, alpha: float = ALPHA,
           min_effect: float = MIN_EFFECT) -> list[ChangePoint]:
    """Change points of a series of runs (each a list of its samples), oldest first."""
    runs = [list(r) for r in runs if len(r) > 0]
    if len(runs) < 2 * MIN_SIZE:
        return []
    means = _means(runs)
    points = _candidates(runs, means)
    while points:
        bounds = [0, *points, len(runs)]
        judged = [(*_judge(runs, means, bounds[i - 1], bounds[i], bounds[i + 1]), bounds[i])
                  for i in range(1, len(bounds) - 1)]
        failing = [(p, k) for p, change, k in judged if p >= alpha or abs(change) < min_effect]
        if not failing:
            out = []
            for p, change, k in judged:
                worse = change < 0 if higher_is_better else change > 0
                out.append(ChangePoint(k, round(change * 100, 3), p,
                                       "regression" if worse else "improvement"))
            return out
        points.remove(max(failing)[1])
    return []
