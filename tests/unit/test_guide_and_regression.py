"""Vendor guides as baselines (seeds 001 and 004) and the regression rule."""

from __future__ import annotations

import random

from benchfarm.core.guides.guide import read_guide
from benchfarm.core.statistics.regression import (
    RegressionPolicy,
    Sample,
    Thresholds,
    compare,
    compare_metric,
)
from benchfarm.report.tables import guide_rst
from tests.conftest import guide


def _guide(name):
    return read_guide(guide(name))


def test_seed_001_imports_with_its_numbers():
    base = _guide("001_am62lx_linux_performance_guide.rst").baseline()
    v = base["bw_mem-bcopy-16mb (MB/s)"]
    assert (v.mean, v.min, v.max) == (785.15, 707.87, 861.19)
    assert base["dhrystone_per_mhz (DMIPS/MHz)"].mean == 9.03
    assert base["linpack (KFLOPS)"].mean == 513526.67
    assert base["coremark-pro ()"].mean == 714.25


def test_seed_004_bare_numbers_import():
    tables = _guide("004_am65x_rt_linux_performance_guide.rst").tables
    assert tables[0].board == "am654x-evm"
    base = _guide("004_am65x_rt_linux_performance_guide.rst").baseline("am654x-evm")
    assert base["bw_mem-bcopy-16mb (MB/s)"].mean == 878.4
    assert not base["bw_mem-bcopy-16mb (MB/s)"].has_range


def test_import_then_render_gives_the_same_numbers():
    for name in ("001_am62lx_linux_performance_guide.rst", "004_am65x_rt_linux_performance_guide.rst"):
        tables = _guide(name).tables
        again = read_guide(guide_rst(tables)).tables
        assert [(t.title, t.board, len(t.rows)) for t in again] == \
               [(t.title, t.board, len(t.rows)) for t in tables]
        for a, b in zip((r for t in tables for r in t.rows), (r for t in again for r in t.rows),
                        strict=False):
            assert a.key == b.key
            assert (round(a.value.mean, 2), round(a.value.min, 2), round(a.value.max, 2)) == \
                   (b.value.mean, b.value.min, b.value.max)


def _noisy(mean, n=8, spread=0.01, seed=1):
    rnd = random.Random(seed)
    return [mean * (1 + rnd.uniform(-spread, spread)) for _ in range(n)]


def test_a_real_slowdown_is_flagged_and_noise_is_not():
    base = Sample.of(_noisy(1000, seed=1))
    th = Thresholds()
    worse = compare_metric("bw (MB/s)", base, Sample.of(_noisy(900, seed=2)), True, th)
    assert worse.verdict == "regressed" and worse.change < -0.05
    same = compare_metric("bw (MB/s)", base, Sample.of(_noisy(1002, seed=3)), True, th)
    assert same.verdict == "unchanged"
    better = compare_metric("lat (us)", Sample.of(_noisy(50, seed=4)), Sample.of(_noisy(40, seed=5)),
                            False, th)
    assert better.verdict == "improved"


def test_small_but_significant_change_below_min_effect_is_not_a_regression():
    base = Sample.of([100.0, 100.1, 99.9, 100.05, 99.95, 100.02])
    cur = Sample.of([98.9, 99.0, 98.95, 99.05, 98.98, 99.02])  # -1 %: significant, tiny
    assert compare_metric("x (MB/s)", base, cur, True, Thresholds()).verdict == "unchanged"


def test_against_a_vendor_summary_uses_the_widened_range():
    base = Sample.summary(785.15, 707.87, 861.19)
    th = Thresholds(tolerance=0.05)
    assert compare_metric("bw (MB/s)", base, Sample.of([690.0]), True, th).verdict == "unchanged"
    assert compare_metric("bw (MB/s)", base, Sample.of([600.0]), True, th).verdict == "regressed"
    lat = Sample.summary(26.34, 25.59, 27.41)
    assert compare_metric("lat_pipe (us)", lat, Sample.of([30.0, 31.0]), False, th).verdict == "regressed"


def test_thresholds_per_family_and_ordering():
    policy = RegressionPolicy(families={"cyclictest": Thresholds(tolerance=0.5)})
    base = {"cyclictest-max (us)": Sample.summary(100, 90, 110), "bw (MB/s)": Sample.summary(10, 9, 11)}
    cur = {"cyclictest-max (us)": Sample.of([150]), "bw (MB/s)": Sample.of([5])}
    rows = compare(base, cur, {}, policy)
    assert [r.key for r in rows if r.verdict == "regressed"] == ["bw (MB/s)"]
    assert "Mann-Whitney" in policy.describe()
