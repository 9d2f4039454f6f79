"""A suite step's energy from the rail sampler's readings (core.readings.power.step_power) and
the energy metrics a step gets (energy, average power, the headline's per-watt or energy)."""

from __future__ import annotations

import pytest

from benchfarm.api.conditions import MAX_POWER_SAMPLES, StepPower
from benchfarm.core.readings import power
from benchfarm.suites.base import Metric


def test_energy_is_the_trapezoid_per_rail_and_in_total_over_the_step():
    readings = [(float(t), {"core": (0.75, 1000.0), "ddr": (1.1, 500.0 + 100 * t)})
                for t in range(11)]
    step = power.step_power(readings, 0.0, 10.0, wall_offset=1000.0)
    assert step is not None
    assert step.rails["core"].energyJ == 10.0 and step.rails["core"].averageW == 1.0
    assert step.rails["ddr"].averageW == 1.0 and step.rails["ddr"].energyJ == 10.0
    assert (step.seconds, step.energyJ, step.averageW) == (10.0, 20.0, 2.0)
    assert step.samples[0] == (1000.0, 1500.0) and step.samples[-1] == (1010.0, 2500.0)


def test_readings_outside_the_step_do_not_count_and_one_reading_is_its_level():
    readings = [(0.0, {"core": (1.0, 9000.0)}), (5.0, {"core": (1.0, 2000.0)}),
                (20.0, {"core": (1.0, 9000.0)})]
    step = power.step_power(readings, 1.0, 11.0)
    assert step is not None and (step.averageW, step.energyJ) == (2.0, 20.0)
    assert power.step_power(readings, 6.0, 7.0) is None
    assert power.step_power([(1.0, {})], 0.0, 2.0) is None


def test_the_timeline_samples_are_thinned():
    readings = [(t / 10, {"core": (1.0, 1.0)}) for t in range(5 * MAX_POWER_SAMPLES)]
    step = power.step_power(readings, 0.0, 1e6)
    assert step is not None and len(step.samples) == MAX_POWER_SAMPLES
    assert step.samples[0][0] == 0.0


@pytest.mark.parametrize("headline,companion", [
    (Metric("sysbench-cpu-events", 1200.0, "events/s", True),
     Metric("sysbench-cpu-events-per-watt", 600.0, "events/s/W", True)),
    (Metric("hackbench-time", 3.0, "s", False), Metric("hackbench-time-energy", 6.0, "J", False)),
    (Metric("cyclictest-max", 80.0, "us", False), None),     # a latency has no energy
    (None, None)])
def test_energy_metrics_and_the_headlines_companion(headline, companion):
    step = StepPower(seconds=5.0, energyJ=10.0, averageW=2.0)
    got = power.energy_metrics(step, headline)
    assert got[:2] == [Metric("energy", 10.0, "J", False), Metric("average-power", 2.0, "W", False)]
    assert got[2:] == ([companion] if companion else [])
    assert all(not m.higher_is_better for m in got[:2])
