"""Adaptive repetition (spec.repeat): when a run has measured enough, from its values alone."""

from __future__ import annotations

import math

import pytest

from benchfarm.core.statistics.repeat import AT_MAXIMUM, STABLE, decide, interval
from benchfarm.report.tables import markdown


def test_interval_is_students_t_half_width():
    # 10, 12, 14: mean 12, s = 2, t(0.975, 2) = 4.3027 -> 4.3027 * 2 / sqrt(3) = 4.968
    iv = interval("m", [10.0, 12.0, 14.0])
    assert iv.n == 3 and iv.mean == 12.0
    assert iv.half_width == pytest.approx(4.968, abs=1e-3)
    assert iv.relative == pytest.approx(0.414, abs=1e-3)
    assert interval("m", [5.0, 5.0, 5.0]).relative == 0.0
    assert math.isinf(interval("m", [1.0]).relative)          # one value says nothing
    assert math.isinf(interval("m", [-1.0, 1.0]).relative)    # a spread around zero


def test_a_stable_metric_stops_at_the_minimum():
    stable = {"hackbench: hackbench-time (s)": [0.230, 0.231, 0.229]}
    assert decide(stable, 0.02, 2, 3, 30) is None               # fewer than minIterations
    assert decide(stable, 0.02, 3, 3, 30) == STABLE             # +-1.1 %: within +-2 %


def test_a_noisy_metric_runs_to_the_maximum_and_every_metric_must_be_within():
    noisy = {"cyclictest: cyclictest-max (us)": [4924.0, 7081.0, 5100.0, 6900.0]}
    assert decide(noisy, 0.02, 4, 3, 30) is None
    assert decide(noisy, 0.02, 30, 3, 30) == AT_MAXIMUM
    both = {"a": [1.0, 1.0, 1.0], "b": [1.0, 2.0, 3.0]}
    assert decide(both, 0.05, 3, 3, 5) is None                  # one metric is enough to go on
    assert decide({}, 0.02, 3, 3, 5) == STABLE                  # nothing measured: nothing to wait for


def test_the_report_says_why_it_stopped_per_metric():
    doc = {"run": {"namespace": "d", "name": "r", "board": "b"}, "series": [],
           "repeat": {"target": 0.02, "minIterations": 3, "maxIterations": 5, "iterations": 5,
                      "stoppedBecause": AT_MAXIMUM,
                      "metrics": [{"metric": "c: cyclictest-max (us)", "n": 5, "mean": 6000.0,
                                   "halfWidth95": 1200.0, "relativeCI95": 0.2,
                                   "withinTarget": False}]}}
    md = markdown(doc)
    assert "## Repetition" in md and "Stopped after 5 iterations" in md
    assert "maximum of 5 iterations was reached" in md
    assert "| c: cyclictest-max (us) | 5 | 6000 | 1200 | +-20.00 % | no |" in md
