#!/usr/bin/env python3
"""What a bisection's adaptive steps save against a fixed count of pairs per step, and what one
pair per step (the Phoronix Test Suite's bisect: one run each, a fixed 3 % rule) gets wrong.

Simulated boards, the real search and step rule (`benchfarm.core.bisection`): 16 candidates
between a good and a bad build (17 builds after the good one), the first bad one drawn at random
per trial (or none), a real slowdown of `EFFECT` from it on; each pair is the reference and the
candidate measured back to back, a common drift of the board (2 %) times each side's own noise
(the per-sample coefficient of variation, by row). A bisection's threshold is 5 %. Board time is
counted in pairs (two iterations each). Prints figures and ratios, asserts nothing.

Usage: bisection_bench.py [TRIALS] (default 400 per row).
"""

from __future__ import annotations

import random
import statistics
import sys

sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0] + "/operator")

from benchfarm.api.outcomes import BisectionAnswer, StepVerdict  # noqa: E402
from benchfarm.core.bisection.judge import judge  # noqa: E402
from benchfarm.core.bisection.search import answer, next_build  # noqa: E402

BUILDS, THRESHOLD, EFFECT, DRIFT = 17, 0.05, 0.10, 0.02


def pair(rng: random.Random, slow: bool, noise: float) -> tuple[float, float]:
    drift = 100.0 * (1 + rng.gauss(0, DRIFT))
    return (drift * (1 + rng.gauss(0, noise)),
            drift * (1 - (EFFECT if slow else 0.0)) * (1 + rng.gauss(0, noise)))


def step_adaptive(bound):
    def step(rng, slow, noise):
        pairs: list[tuple[float, float]] = []
        while True:
            pairs.append(pair(rng, slow, noise))
            j = judge(pairs, True, THRESHOLD, bound)
            if j.verdict is not None:
                return j.verdict, len(pairs)
    return step


def step_fixed(count):
    def step(rng, slow, noise):
        pairs = [pair(rng, slow, noise) for _ in range(count)]
        return judge(pairs, True, THRESHOLD, count).verdict, count
    return step


def step_one_run(rng, slow, noise):
    a, b = pair(rng, slow, noise)
    return (StepVerdict.bad if (a - b) / a > 0.03 else StepVerdict.good), 1


def bisect(rng, first, noise, step):
    verdicts: dict[int, StepVerdict] = {}
    pairs = 0
    while (build := next_build(BUILDS, verdicts)) is not None:
        verdicts[build], used = step(rng, build >= first, noise)
        pairs += used
    found = answer(BUILDS, verdicts)
    assert found is not None
    right = (found.kind == BisectionAnswer.culprit and found.first_bad == first) or (
        first == BUILDS and found.kind == BisectionAnswer.no_change)
    near = not right and first in found.suspects
    return len(verdicts), pairs, right, near


def main() -> None:
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    rules = [("adaptive (3..12 pairs)", step_adaptive(12)),
             ("adaptive (3..20 pairs)", step_adaptive(20)), ("fixed 5 pairs", step_fixed(5)),
             ("fixed 10 pairs", step_fixed(10)), ("one run, 3 % rule", step_one_run)]
    print(f"{trials} bisections per row: 17 builds, a {EFFECT:.0%} slowdown from a random one "
          f"(or none), threshold {THRESHOLD:.0%}, board drift {DRIFT:.0%}")
    print(f"{'noise':>6} {'rule':<24} {'steps':>6} {'pairs':>6} {'right':>7} {'in range':>9} "
          f"{'wrong':>7} {'pairs vs adaptive':>18}")
    for noise in (0.005, 0.02, 0.04):
        base = None
        for name, step in rules:
            rng = random.Random(7)
            rows = [bisect(rng, rng.randint(0, BUILDS), noise, step) for _ in range(trials)]
            steps = statistics.fmean(r[0] for r in rows)
            pairs = statistics.fmean(r[1] for r in rows)
            right = sum(r[2] for r in rows) / trials
            near = sum(r[3] for r in rows) / trials
            base = base or pairs
            print(f"{noise:>6.1%} {name:<24} {steps:>6.2f} {pairs:>6.1f} {right:>7.1%} "
                  f"{near:>9.1%} {1 - right - near:>7.1%} {pairs / base:>17.2f}x")


if __name__ == "__main__":
    main()
