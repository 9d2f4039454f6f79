"""Rail power in low-power modes: from timestamped monitor readings to the guides' rail table.

Pure. A reading is (time, {rail: (volts, mW)}); the suite keeps the readings that fall in a mode's
measurement window and summarises each rail (voltage, mean, min, max power) and the total, in the
layout of TI's "Deep Sleep Power Performance" table. `sense_power` turns one capture of a rail's
current-sense channel (what a sigrok instrument records) into such a (volts, mW) pair.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

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
