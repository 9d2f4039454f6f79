"""The change-point core (benchfarm.core.statistics.changepoints) on synthetic series of runs with samples."""

import random

from benchfarm.core.statistics.changepoints import detect


def runs(means, rng, samples=5, run_noise=0.01, sample_noise=0.02):
    """Runs of `samples` samples each: a run's own offset (run-to-run noise) plus sample noise."""
    out = []
    for m in means:
        centre = m * (1 + rng.gauss(0, run_noise))
        out.append([centre * (1 + rng.gauss(0, sample_noise)) for _ in range(samples)])
    return out


def test_a_step_at_the_13th_run_is_one_point_there():
    rng = random.Random(1)
    series = runs([100.0] * 12 + [90.0] * 8, rng)          # higher is better: a 10 % drop
    points = detect(series, higher_is_better=True)
    assert len(points) == 1
    p = points[0]
    assert abs(p.index - 12) <= 1                           # index 12: the 13th run
    assert p.direction == "regression"
    assert -13 < p.magnitude < -7
    assert p.pvalue < 0.001


def test_lower_is_better_step_up_is_a_regression_and_down_an_improvement():
    rng = random.Random(2)
    up = detect(runs([10.0] * 10 + [12.0] * 10, rng), higher_is_better=False)
    down = detect(runs([10.0] * 10 + [8.0] * 10, rng), higher_is_better=False)
    assert [p.direction for p in up] == ["regression"]
    assert [p.direction for p in down] == ["improvement"]


def test_twenty_quiet_runs_have_no_point():
    assert detect(runs([100.0] * 20, random.Random(3)), higher_is_better=True) == []


def test_false_alarms_over_resampled_quiet_series_are_rare():
    """Quiet series made by resampling one pool of measured runs: at most 1 false alarm in 50."""
    rng = random.Random(4)
    pool = runs([100.0] * 40, rng, run_noise=0.02, sample_noise=0.03)
    alarms = sum(bool(detect([rng.choice(pool) for _ in range(20)], higher_is_better=True))
                 for _ in range(50))
    assert alarms <= 1


def test_a_shift_within_the_run_to_run_noise_is_not_a_point():
    """Samples of a run agree tightly, runs scatter by 5 %: a 2 % shift is no change."""
    rng = random.Random(5)
    series = runs([100.0] * 10 + [102.0] * 10, rng, run_noise=0.05, sample_noise=0.001)
    assert detect(series, higher_is_better=True) == []


def test_short_series_have_no_points():
    assert detect([[1.0], [1.0], [5.0]], higher_is_better=True) == []


def test_a_step_in_a_series_without_run_to_run_noise_is_found_where_it_is():
    """Runs whose means repeat exactly (a fixed figure): the step is still at the 13th run."""
    series = [[1000.0 + i % 3, 1001.0, 999.0] for i in range(12)] + \
        [[500.0 + i % 2, 500.0, 499.0] for i in range(8)]
    assert [(p.index, p.direction) for p in detect(series, higher_is_better=True)] == \
        [(12, "regression")]
