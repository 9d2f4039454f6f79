"""What results were measured under, in a few numbers, and how two stretches of a series differ.

Every suite record of a run carries its iteration's conditions (api.conditions.StepConditions as
a dict), and metrics.json a summary of them per step (core.statistics.conditions, over the
iterations that count: no warm-up, no error, valid). `Measured` is such a summary in the few
numbers the history keeps per run and step and the guide states per board: the lowest, median
and highest current CPU frequency (MHz, every policy of every snapshot), the governors, the
temperature range (°C, every zone), the mean of the iterations' average power (W), and whether
the source was simulated. `by_step` reads a document's per-step summary (or derives it from its
records where it has none), `overall` pools every step's counted records (a board's line in a
guide); the records decide which values are samples (`counted`, `counted_series`).

`differences` says how the runs before a change point and the runs after it were measured
otherwise: the median of the runs' median frequency moved by more than FREQUENCY_CHANGE, the
governors are others, the median of the runs' hottest zone moved by more than TEMPERATURE_CHANGE
°C; `note` words it ("measured under other conditions: frequency 1000 → 600 MHz"), so a person
sees a frequency cap or a hotter lab beside the build. A side that recorded no conditions claims
no difference. Pure.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchfarm.core.statistics import conditions
from benchfarm.suites.base import normalize_unit

FREQUENCY_CHANGE = 0.05      # relative: 5 % of the runs' median frequency before the point
TEMPERATURE_CHANGE = 10.0    # °C of the runs' hottest zone
MAX_GOVERNORS = 4            # governors kept per summary (a board has a handful of policies)
GOVERNOR_CHARS = 32          # as api.conditions.Envelope.governor


@dataclass(frozen=True)
class Measured:
    """What the counted iterations of one step (or of a whole run) were measured under; None:
    not recorded (no snapshot said it)."""

    iterations: int                       # the counted iterations
    min_mhz: float | None = None
    median_mhz: float | None = None
    max_mhz: float | None = None
    governors: tuple[str, ...] = ()
    min_temp_c: float | None = None
    max_temp_c: float | None = None
    mean_power_w: float | None = None
    simulated: bool = False


def counted(record: Mapping[str, Any]) -> bool:
    """Whether a metrics.json record's values are in the series: measured (not a warm-up),
    without an error, valid (or measured with no envelope)."""
    cond = record.get("conditions")
    valid = not isinstance(cond, Mapping) or cond.get("valid", True) is not False
    return not record.get("warmup") and not record.get("error") and valid


def counted_series(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A metrics.json (or an A/B side's) with each series' values those of its counted records,
    in their order, so an iteration marked invalid enters no series whatever the document's own
    `series` says; a series none of whose records counts is left out. A document without records
    (written before they were kept) as it is."""
    records = doc.get("records")
    if not isinstance(records, list):
        return dict(doc)
    values: dict[tuple[str, str, str], list[float]] = {}
    for r in records:
        if not isinstance(r, Mapping) or not counted(r):
            continue
        for m in r.get("metrics") or []:
            if isinstance(m, Mapping) and (v := _number(m.get("value"))) is not None:
                values.setdefault(_key(r.get("step"), m.get("name"), m.get("unit")), []).append(v)
    kept = []
    for s in doc.get("series") or []:
        got = values.get(_key(s.get("step"), s.get("name"), s.get("unit"))) \
            if isinstance(s, Mapping) else None
        if got:
            kept.append({**s, "values": got})
    return {**doc, "series": kept}


def iteration_values(doc: Mapping[str, Any], metric: str) -> dict[int, float]:
    """iteration -> value of the metric `STEP/NAME (UNIT)` in a metrics.json (or an A/B side's),
    of its counted records only: what pairs two sides' iterations (an A/B run alternates them, and
    an iteration that did not count on one side pairs with nothing)."""
    head, _, unit = metric.rpartition(" (")
    step, _, name = head.partition("/")
    want = _key(step, name, unit.removesuffix(")"))
    out: dict[int, float] = {}
    for r in doc.get("records") or []:
        if not isinstance(r, Mapping) or not counted(r) or not isinstance(r.get("iteration"), int):
            continue
        for m in r.get("metrics") or []:
            if isinstance(m, Mapping) and _key(r.get("step"), m.get("name"), m.get("unit")) == want \
                    and (v := _number(m.get("value"))) is not None:
                out[r["iteration"]] = v
    return out


def _key(step: Any, name: Any, unit: Any) -> tuple[str, str, str]:
    return str(step), str(name), normalize_unit(str(unit or ""))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def from_summary(summary: Mapping[str, Any]) -> Measured | None:
    """A core.statistics.conditions step summary as a `Measured`; None when no counted
    iteration recorded conditions."""
    iterations = summary.get("validIterations")
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        return None
    freq, temp = _mapping(summary.get("frequencyMHz")), _mapping(summary.get("temperatureC"))
    said = summary.get("governors")
    governors = [str(g)[:GOVERNOR_CHARS] for g in said] if isinstance(said, list) else []
    return Measured(iterations, _number(freq.get("min")), _number(freq.get("median")),
                    _number(freq.get("max")), tuple(sorted(set(governors))[:MAX_GOVERNORS]),
                    _number(temp.get("min")), _number(temp.get("max")),
                    _number(summary.get("averageW")), summary.get("simulated") is True)


def _records(doc: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    return [r for r in doc.get(key) or [] if isinstance(r, Mapping)]


def by_step(doc: Mapping[str, Any]) -> dict[str, Measured]:
    """What each step of one run (or one A/B side) was measured under: the document's own
    per-step summary (`conditions`, as the session wrote it from the same records), else
    derived from its records and the attempts taken again (a document written before it had
    one); steps with no counted iteration that recorded any left out."""
    said = doc.get("conditions")
    summaries: Mapping[str, Mapping[str, Any]]
    if isinstance(said, Mapping):
        summaries = {str(k): v for k, v in said.items() if isinstance(v, Mapping)}
    else:
        attempts = conditions.attempts(_records(doc, "records"), _records(doc, "retaken"))
        summaries = conditions.summaries(attempts)
    out = {}
    for step, summary in summaries.items():
        m = from_summary(summary)
        if m is not None:
            out[step] = m
    return out


def overall(doc: Mapping[str, Any]) -> Measured | None:
    """What a run's counted iterations were measured under, every step's together (a board's
    line in a guide); None when none recorded any."""
    attempts = conditions.attempts(_records(doc, "records"), _records(doc, "retaken"))
    if not any(a.recorded for a in attempts):
        return None
    return from_summary(conditions.step_summary(attempts, _simulated(doc)))


def _simulated(doc: Mapping[str, Any]) -> bool:
    """Whether the document's own summary says a step's source was simulated (the device
    type's; the records say it of themselves too)."""
    said = doc.get("conditions")
    return isinstance(said, Mapping) and any(
        isinstance(s, Mapping) and s.get("simulated") is True for s in said.values())


def _median(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _shown(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.2g}"


def differences(before: Sequence[Measured | None], after: Sequence[Measured | None]
                ) -> list[str]:
    """How the runs `after` a change point were measured otherwise than those `before` it, one
    phrase per difference ("frequency 1000 → 600 MHz", "governor performance → powersave",
    "temperature 45 → 71 °C"); empty when alike or when a side recorded nothing to compare."""
    a = [m for m in before if m is not None]
    b = [m for m in after if m is not None]
    if not a or not b:
        return []
    out = []
    fa, fb = _median(m.median_mhz for m in a), _median(m.median_mhz for m in b)
    if fa is not None and fb is not None and fa > 0 and abs(fb - fa) / fa > FREQUENCY_CHANGE:
        out.append(f"frequency {_shown(fa)} → {_shown(fb)} MHz")
    ga = sorted({g for m in a for g in m.governors})
    gb = sorted({g for m in b for g in m.governors})
    if ga and gb and ga != gb:
        out.append(f"governor {'+'.join(ga)} → {'+'.join(gb)}")
    ta, tb = _median(m.max_temp_c for m in a), _median(m.max_temp_c for m in b)
    if ta is not None and tb is not None and abs(tb - ta) > TEMPERATURE_CHANGE:
        out.append(f"temperature {_shown(ta)} → {_shown(tb)} °C")
    return out


def note(found: Sequence[str]) -> str:
    """The sentence a change point shows beside its build ("" when the conditions were alike)."""
    return f"measured under other conditions: {'; '.join(found)}" if found else ""


def around(points: Sequence[int], runs: Sequence[Measured | None]) -> list[list[str]]:
    """`differences` at each change point of a series (`points`: the index of each one's first
    run after the change, ascending), between the runs since the previous point and the runs up
    to the next one: the stretches the point was judged on."""
    bounds = [0, *points, len(runs)]
    return [differences(runs[bounds[i - 1]:bounds[i]], runs[bounds[i]:bounds[i + 1]])
            for i in range(1, len(bounds) - 1)]
