"""Rail power: from timestamped monitor readings to the guides' rail table and a step's energy.

Pure. A reading is (time, {rail: (volts, mW)}); the suite keeps the readings that fall in a mode's
measurement window and summarises each rail (voltage, mean, min, max power) and the total, in the
layout of TI's "Deep Sleep Power Performance" table. `sense_power` turns one capture of a rail's
current-sense channel (what a sigrok instrument records) into such a (volts, mW) pair.

Every suite step is sampled too (api.conditions): `step_power` integrates the readings of a step
(trapezoid, per rail and in total) into its energy and average power, and `energy_metrics` makes
them metrics like any other: `energy`, `average-power`, and the headline's companion (its value
per watt when higher is better, its energy when it is a time).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from benchfarm.api.conditions import MAX_POWER_SAMPLES, RailEnergy, StepPower
from benchfarm.suites.base import Metric

Reading = tuple[float, dict[str, tuple[float, float]]]   # (time, rail -> (volts, mW))


@dataclass(frozen=True)
class RailSummary:
    rail: str
    voltage: float
    mean_mw: float
    min_mw: float
    max_mw: float
    samples: int


def sense_power(samples: Iterable[str | float], volts: float, amps_per_volt: float
                ) -> tuple[float, float]:
    """(volts, mW) of a rail from the samples of its current-sense channel over one capture.

    The channel carries a current-sense amplifier's output: rail current = sense volts x
    `amps_per_volt`. Its samples are averaged rectified (mean of |v|): a sense output is never
    negative, so for real hardware this is the plain mean, while a test signal swinging around
    0 V (sigrok's demo patterns) still gives a level. One sense channel measures current only:
    the voltage is the rail's nominal one, and power is nominal volts x current.
    """
    values = [abs(float(v)) for v in samples]
    if not values:
        raise ValueError("the capture holds no samples")
    amps = statistics.fmean(values) * amps_per_volt
    return volts, round(volts * amps * 1000, 4)


def window(readings: Iterable[Reading], start: float, end: float) -> list[Reading]:
    return [r for r in readings if start <= r[0] <= end]


def summarize_rails(readings: Sequence[Reading], rails: Sequence[str]) -> list[RailSummary]:
    if not readings:
        raise ValueError("no rail readings in the measurement window")
    out = []
    for rail in rails:
        values = [r[1][rail] for r in readings if rail in r[1]]
        if not values:
            raise ValueError(f"rail {rail} was never read")
        mws = [mw for _, mw in values]
        out.append(RailSummary(rail, round(statistics.fmean(v for v, _ in values), 3),
                               round(statistics.fmean(mws), 4), round(min(mws), 4),
                               round(max(mws), 4), len(values)))
    return out


def total(summaries: Sequence[RailSummary]) -> float:
    return round(sum(s.mean_mw for s in summaries), 4)


def metrics(mode: str, summaries: Sequence[RailSummary]) -> list[Metric]:
    out: list[Metric] = []
    for s in summaries:
        labels = {"mode": mode, "rail": s.rail}
        out.append(Metric(f"rail-{s.rail}-{mode}", s.mean_mw, "mW", False, labels))
        out.append(Metric(f"rail-{s.rail}-{mode}-voltage", s.voltage, "V", True, labels))
        out.append(Metric(f"rail-{s.rail}-{mode}-min", s.min_mw, "mW", False, labels))
        out.append(Metric(f"rail-{s.rail}-{mode}-max", s.max_mw, "mW", False, labels))
    out.append(Metric(f"rail-total-{mode}", total(summaries), "mW", False, {"mode": mode}))
    return out


def _integral(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(mW x s under the points, by trapezoid; the span they cover in seconds)."""
    area = sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in
               zip(points, points[1:], strict=False))
    return area, points[-1][0] - points[0][0]


def _average_mw(points: Sequence[tuple[float, float]]) -> float:
    area, span = _integral(points)
    return area / span if span > 0 else statistics.fmean(p for _, p in points)


def step_power(readings: Sequence[Reading], start: float, end: float, wall_offset: float = 0.0
               ) -> StepPower | None:
    """A step's power from the readings taken while it ran (`start`..`end`, the readings'
    clock): each rail's and the total's average over the readings (trapezoid over the span they
    cover; one reading: its value), times the step's seconds for the energy. The total's samples
    on the wall clock (reading time + `wall_offset`), thinned to MAX_POWER_SAMPLES. None: no
    reading fell in the step."""
    inside = [r for r in readings if start <= r[0] <= end and r[1]]
    if not inside:
        return None
    seconds = max(0.0, end - start)
    rails: dict[str, RailEnergy] = {}
    for rail in sorted({name for _, values in inside for name in values}):
        avg = _average_mw([(t, values[rail][1]) for t, values in inside if rail in values]) / 1000
        rails[rail] = RailEnergy(energyJ=round(avg * seconds, 4), averageW=round(avg, 4))
    totals = [(t, sum(mw for _, mw in values.values())) for t, values in inside]
    average = _average_mw(totals) / 1000
    step = len(totals) / MAX_POWER_SAMPLES
    kept = totals if step <= 1 else [totals[int(i * step)] for i in range(MAX_POWER_SAMPLES)]
    return StepPower(seconds=round(seconds, 3), energyJ=round(average * seconds, 4),
                     averageW=round(average, 4), rails=rails,
                     samples=[(round(t + wall_offset, 3), round(mw, 3)) for t, mw in kept])


def _figure(value: float) -> float:
    return float(f"{value:.6g}")


def energy_metrics(power: StepPower, headline: Metric | None) -> list[Metric]:
    """The step's `energy` (J) and `average-power` (W), both lower-is-better, and for its
    headline metric H: `H-per-watt` (H's unit per W, higher is better) when higher is better,
    `H-energy` (J: H x the average power) when lower is better and a time in seconds."""
    out = [Metric("energy", _figure(power.energyJ), "J", False),
           Metric("average-power", _figure(power.averageW), "W", False)]
    if headline is None or not math.isfinite(headline.value):
        return out
    if headline.higher_is_better and power.averageW > 0:
        out.append(Metric(f"{headline.name}-per-watt", _figure(headline.value / power.averageW),
                          f"{headline.unit}/W" if headline.unit else "1/W", True))
    elif not headline.higher_is_better and headline.unit == "s":
        out.append(Metric(f"{headline.name}-energy", _figure(headline.value * power.averageW),
                          "J", False))
    return out
