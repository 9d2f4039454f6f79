"""The envelope's verdict on what a board was measured under: why a step's conditions
(api.conditions.StepConditions, read by `core.readings.conditions`) lie outside the bounds its
device type and plan set, one reason each, in words a report can show as they are ("policy0 at
600 MHz, below the envelope's 1000 MHz (during, 3 of 6 samples)"). A bound the board shows
nothing for (no cpufreq, no thermal zone) judges nothing. Pure.
"""

from __future__ import annotations

import math

from benchfarm.api.conditions import Envelope, Snapshot, StepConditions

MAX_REASONS = 12


def _where(hits: dict[str, int], counts: dict[str, int]) -> str:
    parts = []
    for phase in ("before", "during", "after"):
        if hits.get(phase):
            parts.append(phase if phase != "during" else
                         f"during, {hits[phase]} of {counts[phase]} samples")
    return "; ".join(parts)


def before_problems(envelope: Envelope, snap: Snapshot) -> list[str]:
    """What keeps a board from starting a step (judge's reasons on this one snapshot)."""
    return judge(envelope, StepConditions(before=snap), throttling=False)


def judge(envelope: Envelope, conditions: StepConditions, throttling: bool = True) -> list[str]:
    """Why `conditions` lie outside `envelope`, one reason each; empty: valid (a bound the board
    shows nothing for, no cpufreq or thermal zone, judges nothing)."""
    if not envelope.bounded:
        return []
    phases = [("before", s) for s in [conditions.before] if s is not None] + \
        [("during", s) for s in conditions.during] + \
        [("after", s) for s in [conditions.after] if s is not None]
    if not phases:
        return ["no snapshot of the board's conditions was read (its probe printed nothing "
                "that parses)"]
    counts = {"before": 0, "during": 0, "after": 0}
    for phase, _ in phases:
        counts[phase] += 1
    reasons: list[str] = []
    low: dict[str, tuple[float, dict[str, int]]] = {}
    governors: dict[str, tuple[str, dict[str, int]]] = {}
    hot: dict[str, tuple[float, dict[str, int]]] = {}
    for phase, snap in phases:
        for name, policy in snap.cpufreq.items():
            if envelope.minFrequencyMHz is not None and policy.curKHz is not None \
                    and policy.curKHz / 1000 < envelope.minFrequencyMHz:
                mhz, hits = low.get(name, (math.inf, {}))
                hits[phase] = hits.get(phase, 0) + 1
                low[name] = (min(mhz, policy.curKHz / 1000), hits)
            if envelope.governor and policy.governor and policy.governor != envelope.governor:
                _, hits = governors.get(name, (policy.governor, {}))
                hits[phase] = hits.get(phase, 0) + 1
                governors[name] = (policy.governor, hits)
        for name, zone in snap.thermal.items():
            if envelope.maxTemperatureC is not None and zone.tempC is not None \
                    and zone.tempC > envelope.maxTemperatureC:
                temp, hits = hot.get(name, (-math.inf, {}))
                hits[phase] = hits.get(phase, 0) + 1
                hot[name] = (max(temp, zone.tempC), hits)
    for name, (gov, hits) in governors.items():
        reasons.append(f"{name} governor {gov}, not {envelope.governor} ({_where(hits, counts)})")
    for name, (mhz, hits) in low.items():
        reasons.append(f"{name} at {mhz:.0f} MHz, below the envelope's "
                       f"{envelope.minFrequencyMHz:g} MHz ({_where(hits, counts)})")
    for name, (temp, hits) in hot.items():
        reasons.append(f"{name} at {temp:.1f} °C, over {envelope.maxTemperatureC:g} °C "
                       f"({_where(hits, counts)})")
    if throttling and envelope.allowThrottling is False:
        reasons += _throttled([s for _, s in phases])
    before = conditions.before
    if envelope.maxBusyBefore is not None and before is not None and before.busy is not None \
            and before.busy > envelope.maxBusyBefore:
        reasons.append(f"{before.busy * 100:.0f} % busy before the start, over "
                       f"{envelope.maxBusyBefore * 100:.0f} %")
    return [r[:300] for r in reasons[:MAX_REASONS]]


def _throttled(snaps: list[Snapshot]) -> list[str]:
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for snap in snaps:
        for name, count in snap.throttle.items():
            first.setdefault(name, count)
            last[name] = count
    return [f"throttled: {name} counted {last[name] - first[name]} event"
            f"{'s' if last[name] - first[name] != 1 else ''} during the step"
            for name in first if last[name] > first[name]]
