"""Which build a bisection measures next, and what its verdicts found.

The builds after the good one are numbered 0..n-1 in order, the bad one last (n-1): the bad end
is measured like any other, when the search needs it, so "no change in the range" is an answer
and not a mistaken culprit. Of the builds between the highest good and the lowest bad one, those
not yet judged are the open ones; the next step measures the middle one of them (`git bisect`'s
rule, by position among the open builds, so a skipped build moves the step to its neighbour
instead of unbalancing the halves). A good verdict drops the open builds below it, a bad one
those above; a skip or an unclear verdict drops only itself and the answer then names a range.
With o open builds there are o + 1 answers, and a step at the middle leaves at most
ceil((o + 1) / 2) of them: a search over n builds takes at most ceil(log2(n + 1)) measured
steps, plus one step for each skipped or unclear build.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from benchfarm.api.outcomes import BisectionAnswer, StepVerdict


@dataclass(frozen=True)
class Bounds:
    """The highest good build below the lowest bad one (-1: only the reference), the lowest bad
    build (n: none measured bad yet), and the open builds between them."""

    good: int
    bad: int
    open: tuple[int, ...]


def bounds(n: int, verdicts: Mapping[int, StepVerdict]) -> Bounds:
    if n < 1:
        raise ValueError("a bisection needs at least one build after the good one")
    outside = [i for i in verdicts if not 0 <= i < n]
    if outside:
        raise ValueError(f"verdicts for builds outside 0..{n - 1}: {sorted(outside)}")
    bad = min((i for i, v in verdicts.items() if v == StepVerdict.bad), default=n)
    good = max((i for i, v in verdicts.items() if v == StepVerdict.good and i < bad), default=-1)
    return Bounds(good, bad, tuple(i for i in range(good + 1, bad) if i not in verdicts))


def next_build(n: int, verdicts: Mapping[int, StepVerdict]) -> int | None:
    """The build the next step measures, or None: the search is over."""
    b = bounds(n, verdicts)
    return b.open[len(b.open) // 2] if b.open else None


def max_steps(n: int, skipped: int = 0) -> int:
    """The most steps a search over n builds takes, with `skipped` skipped or unclear ones."""
    return math.ceil(math.log2(n + 1)) + skipped


@dataclass(frozen=True)
class Answer:
    kind: BisectionAnswer
    first_bad: int | None           # the lowest build measured bad (None: none was)
    suspects: tuple[int, ...]       # the builds that may be the first bad one, in order
    last_good: int                  # the highest good build below them (-1: the reference)


def answer(n: int, verdicts: Mapping[int, StepVerdict]) -> Answer | None:
    """What the finished search found; None while a build is still to be measured."""
    b = bounds(n, verdicts)
    if b.open:
        return None
    between = tuple(range(b.good + 1, b.bad))         # all skipped or unclear: none is open
    if b.bad < n:
        kind = BisectionAnswer.range if between else BisectionAnswer.culprit
        return Answer(kind, b.bad, (*between, b.bad), b.good)
    kind = BisectionAnswer.inconclusive if between else BisectionAnswer.no_change
    return Answer(kind, None, between, b.good)
