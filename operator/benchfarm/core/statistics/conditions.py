"""What each step's figures were measured under, read from its records' conditions (an
api.conditions.StepConditions as metrics.json holds it, camelCase).

Per attempt of an iteration (`Attempt`) the few facts a reader compares: valid or why not, the
CPU's frequency and governor, the hottest thermal zone, how busy the board was before, throttle
events during the step, its energy and average power. Per step (`step_summary`) those facts over
the valid measured iterations, which are what its published figures were measured under, and
how many attempts were not valid. `unmeasured`: the steps that got no valid measurement at all.

Pure, linear in what it is given. Every value came from a board (or from a metrics.json a tenant's
store credential may have rewritten): a conditions document that does not read as a
StepConditions gives no facts, a value that is not finite is left out, and a reason is cut to
MAX_REASON characters, at most MAX_REASONS of them per attempt.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from benchfarm.api.conditions import Snapshot, StepConditions
from benchfarm.core.statistics.stats import summarize

MAX_REASONS = 8
MAX_REASON = 300
BIG = 2 ** 63          # a counter or a frequency past this is no reading (and no float holds it)


@dataclass(frozen=True)
class Attempt:
    """One measurement of one step in one iteration (`retake` 0: the first; n: its n-th retake)."""

    step: str
    iteration: int
    retake: int = 0
    warmup: bool = False
    ok: bool = True                    # the suite ran (no error)
    recorded: bool = False             # it has conditions that could be read
    valid: bool = True
    reasons: tuple[str, ...] = ()
    frequencies: tuple[float, ...] = ()   # MHz: every policy's current frequency, every snapshot
    governors: tuple[str, ...] = ()
    temperatures: tuple[float, ...] = ()  # °C: every thermal zone, every snapshot
    busy_before: float | None = None
    throttle_events: int | None = None     # how far the throttle counters moved during the step
    energy_j: float | None = None
    average_w: float | None = None
    rails: dict[str, tuple[float, float]] = field(default_factory=dict)   # rail -> (J, W)
    artifact: str | None = None
    retaken: bool = False              # an invalid attempt that was measured again
    simulated: bool = False            # its source was a stand-in the lab drives

    @property
    def frequency_range(self) -> tuple[float, float] | None:
        return (min(self.frequencies), max(self.frequencies)) if self.frequencies else None

    @property
    def temperature_max(self) -> float | None:
        return max(self.temperatures) if self.temperatures else None


def _finite(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


def _snapshots(c: StepConditions) -> list[Snapshot]:
    return [s for s in (c.before, *c.during, c.after) if s is not None]


def attempt(record: Mapping[str, Any], *, retaken: bool = False) -> Attempt:
    """The facts of one record (a SuiteRecord's `as_dict`, as metrics.json holds it)."""
    raw = record.get("conditions")
    base: dict[str, Any] = {
            "step": str(record.get("step", "")), "iteration": _int(record.get("iteration")),
            "warmup": bool(record.get("warmup")), "ok": not record.get("error"),
            "artifact": None if record.get("artifact") is None else str(record["artifact"]),
            "retaken": retaken}
    if not isinstance(raw, Mapping):
        return Attempt(**base)
    try:
        c = StepConditions.model_validate(raw)
    except ValidationError:
        valid = raw.get("valid", True) is not False
        return Attempt(**base, recorded=True, valid=valid,
                       reasons=() if valid else ("its conditions could not be read",))
    snaps = _snapshots(c)
    freqs, governors = [], []
    for s in snaps:
        for p in s.cpufreq.values():
            if p.curKHz is not None and abs(p.curKHz) < BIG:
                freqs.append(p.curKHz / 1000)
            if p.governor and p.governor not in governors:
                governors.append(p.governor)
    temps = [z.tempC for s in snaps for z in s.thermal.values() if _finite(z.tempC) is not None]
    throttle = None
    if c.before is not None and c.after is not None and (c.before.throttle or c.after.throttle):
        throttle = sum(max(0, n - c.before.throttle.get(k, n)) for k, n in c.after.throttle.items()
                       if abs(n) < BIG and abs(c.before.throttle.get(k, n)) < BIG)
    power = c.power
    rails = {} if power is None else {
        name: (r.energyJ, r.averageW) for name, r in power.rails.items()
        if _finite(r.energyJ) is not None and _finite(r.averageW) is not None}
    return Attempt(**{**base, "retake": c.retake}, recorded=True, valid=c.valid,
                   reasons=tuple(r[:MAX_REASON] for r in c.invalid[:MAX_REASONS]),
                   frequencies=tuple(freqs),
                   governors=tuple(governors), temperatures=tuple(t for t in temps if t is not None),
                   simulated=c.simulated,
                   busy_before=None if c.before is None else _finite(c.before.busy),
                   throttle_events=throttle,
                   energy_j=None if power is None else _finite(power.energyJ),
                   average_w=None if power is None else _finite(power.averageW), rails=rails)


def _int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return 0


def attempts(records: Iterable[Mapping[str, Any]], retaken: Iterable[Mapping[str, Any]] = ()
             ) -> list[Attempt]:
    """Every attempt, in step order (first seen), then iteration, then retake: the invalid
    attempts that were measured again (`retaken`) before the iteration's last."""
    out = [attempt(r) for r in records] + [attempt(r, retaken=True) for r in retaken]
    order: dict[str, int] = {}
    for a in out:
        order.setdefault(a.step, len(order))
    return sorted(out, key=lambda a: (order[a.step], a.iteration, not a.retaken, a.retake))


def _range(values: list[float]) -> dict[str, float] | None:
    return {"min": min(values), "max": max(values)} if values else None


def _mean(values: list[float]) -> float | None:
    """The mean, None of nothing; figures near the float's limit summed without overflowing
    (stats.summarize: a board may say 1e308 W)."""
    return summarize(values).mean if values else None


def step_summary(step_attempts: list[Attempt], simulated: bool = False) -> dict[str, Any]:
    """One step's conditions over its valid measured iterations (what its statistics were
    measured under): frequency (MHz: min, median, max) and the governors seen, temperature
    (°C, every zone's: min and max), busy before (min, max), throttle events, energy (J)
    and average power (W) as means, per rail too; and how many attempts were not valid."""
    measured = [a for a in step_attempts if not a.warmup and not a.retaken]
    valid = [a for a in measured if a.ok and a.valid]
    freqs = [f for a in valid for f in a.frequencies]
    rails: dict[str, list[tuple[float, float]]] = {}
    for a in valid:
        for name, jw in a.rails.items():
            rails.setdefault(name, []).append(jw)
    energy = _mean([a.energy_j for a in valid if a.energy_j is not None])
    power = _mean([a.average_w for a in valid if a.average_w is not None])
    throttle = [a.throttle_events for a in valid if a.throttle_events is not None]
    return {
        "simulated": simulated or any(a.simulated for a in step_attempts),
        "iterations": len(measured), "validIterations": len(valid),
        "invalidAttempts": sum(1 for a in step_attempts if a.recorded and not a.valid),
        "frequencyMHz": None if not freqs else {
            "min": min(freqs), "median": statistics.median(freqs), "max": max(freqs)},
        "governors": list(dict.fromkeys(g for a in valid for g in a.governors)),
        "temperatureC": _range([t for a in valid for t in a.temperatures]),
        "busyBefore": _range([a.busy_before for a in valid if a.busy_before is not None]),
        "throttleEvents": sum(throttle) if throttle else None,
        "energyJ": energy, "averageW": power,
        "rails": {name: {"energyJ": _mean([j for j, _ in v]), "averageW": _mean([w for _, w in v])}
                  for name, v in rails.items()},
    }


def _by_step(all_attempts: list[Attempt]) -> dict[str, list[Attempt]]:
    by_step: dict[str, list[Attempt]] = {}
    for a in all_attempts:
        by_step.setdefault(a.step, []).append(a)
    return by_step


def summaries(all_attempts: list[Attempt], simulated: bool = False) -> dict[str, dict[str, Any]]:
    """Each step's summary (`step_summary`), for the steps whose attempts recorded conditions."""
    return {step: step_summary(v, simulated) for step, v in _by_step(all_attempts).items()
            if any(a.recorded for a in v)}


def unmeasured(all_attempts: list[Attempt]) -> dict[str, list[str]]:
    """The steps that got no valid measurement: some attempt was outside its envelope and no
    measured iteration was both run and valid; each with the first reasons given."""
    out: dict[str, list[str]] = {}
    for step, v in _by_step(all_attempts).items():
        summary = step_summary(v)
        if summary["invalidAttempts"] and not summary["validIterations"]:
            reasons = dict.fromkeys(r for a in v if not a.valid for r in a.reasons)
            out[step] = list(reasons)[:MAX_REASONS]
    return out
