"""From raw records of a run (boots, suite outputs per iteration) to the figures people read.

Pure. Warm-up iterations, and iterations measured outside their envelope (`SuiteRecord.valid`),
are kept in the records but left out of the statistics. The summary that goes into the CR status
stays small (headline figures only); the full table goes to metrics.json.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from benchfarm.core.statistics import conditions
from benchfarm.core.statistics.stats import seed_format, summarize
from benchfarm.suites.base import Metric

HEADLINE = {
    "cyclictest": "cyclictest-max", "hackbench": "hackbench-time", "sysbench": "sysbench-cpu-events",
    "iperf3": "iperf3-received", "dd": "dd-throughput", "mbw": "mbw-memcpy",
}


@dataclass
class SuiteRecord:
    step: str
    suite: str
    iteration: int                 # 1-based, warm-ups included
    warmup: bool
    exit_code: int | None
    seconds: float
    metrics: list[Metric] = field(default_factory=list)
    error: str | None = None
    artifact: str | None = None
    # what it was measured under: api.conditions.StepConditions as a dict (None: not recorded)
    conditions: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def valid(self) -> bool:
        """Measured inside its envelope (or with none): an invalid record is kept in the raw
        data and the reports, never in the statistics."""
        return self.conditions is None or bool(self.conditions.get("valid", True))

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step, "suite": self.suite, "iteration": self.iteration,
                "warmup": self.warmup, "exitCode": self.exit_code, "seconds": round(self.seconds, 3),
                "error": self.error, "artifact": self.artifact,
                "metrics": [m.as_dict() for m in self.metrics],
                **({"conditions": self.conditions} if self.conditions is not None else {})}


@dataclass
class MetricSeries:
    step: str
    name: str
    unit: str
    higher_is_better: bool
    values: list[float] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.name} ({self.unit})"

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step, "name": self.name, "unit": self.unit,
                "higherIsBetter": self.higher_is_better, "values": self.values,
                "summary": summarize(self.values).as_dict(), "display": seed_format(self.values)}


def series(records: list[SuiteRecord]) -> list[MetricSeries]:
    """Values of each (step, metric) across the measured iterations, in first-seen order."""
    out: dict[tuple[str, str], MetricSeries] = {}
    for rec in records:
        if rec.warmup or not rec.ok or not rec.valid:
            continue
        for m in rec.metrics:
            s = out.setdefault((rec.step, m.key),
                               MetricSeries(rec.step, m.name, m.unit, m.higher_is_better))
            s.values.append(m.value)
    return list(out.values())


def boot_series(boots: list[dict[str, float]]) -> dict[str, list[float]]:
    by_phase: dict[str, list[float]] = defaultdict(list)
    for boot in boots:
        for phase, seconds in boot.items():
            by_phase[phase].append(seconds)
    return dict(by_phase)


def headline(step_series: list[MetricSeries], suite: str) -> MetricSeries | None:
    if not step_series:
        return None
    wanted = HEADLINE.get(suite)
    for s in step_series:
        if s.name == wanted:
            return s
    return step_series[0]


def summary(boots: list[dict[str, float]], headline_phase: str, records: list[SuiteRecord],
            steps: list[tuple[str, str]]) -> dict[str, Any]:
    """The short status.results: boot headline and each step's headline metric."""
    out: dict[str, Any] = {}
    phases = boot_series(boots)
    if headline_phase in phases:
        s = summarize(phases[headline_phase])
        out["boot"] = {"phase": headline_phase, "n": s.n, "mean": round(s.mean, 3),
                       "min": s.min, "max": s.max, "display": seed_format(phases[headline_phase])}
    all_series = series(records)
    suites_out = {}
    for step, suite in steps:
        step_recs = [r for r in records if r.step == step and not r.warmup]
        failed = [r for r in step_recs if not r.ok]
        entry: dict[str, Any] = {"suite": suite, "runs": len(step_recs), "failed": len(failed)}
        h = headline([s for s in all_series if s.step == step], suite)
        if h is not None:
            entry["headline"] = f"{h.name} ({h.unit})"
            entry["value"] = seed_format(h.values)
        if failed:
            entry["error"] = (failed[0].error or "")[:200]
        invalid = [r for r in step_recs if r.ok and not r.valid]
        if invalid:      # measured outside the envelope even after its retakes: not counted
            entry["invalid"] = len(invalid)
        suites_out[step] = entry
    out["suites"] = suites_out
    return out


def metrics_document(run: dict[str, Any], boots: list[dict[str, float]],
                     records: list[SuiteRecord], retaken: list[SuiteRecord] | None = None,
                     *, simulated: bool = False) -> dict[str, Any]:
    """Everything measured, for metrics.json: every record with its conditions, the attempts
    measured outside their envelope and taken again (`retaken`: kept, never in the series), and
    each step's conditions summary (core.statistics.conditions; `simulated`: the device type's
    conditions are a stand-in the lab drives)."""
    phases = boot_series(boots)
    records_out = [r.as_dict() for r in records]
    retaken_out = [r.as_dict() for r in retaken or []]
    return {
        "run": run,
        "boots": boots,
        "bootSummary": {p: {**summarize(v).as_dict(), "display": seed_format(v)}
                        for p, v in phases.items()},
        "series": [s.as_dict() for s in series(records)],
        "records": records_out,
        "retaken": retaken_out,
        "conditions": conditions.summaries(conditions.attempts(records_out, retaken_out),
                                           simulated),
    }


def samples_from_document(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, bool]]:
    """metric key -> regression.Sample (values across iterations), and each key's direction.

    Steps that measure the same metric (e.g. cyclictest idle and under load) stay apart by the
    step name in the key."""
    from benchfarm.core.statistics.regression import Sample
    samples: dict[str, Any] = {}
    direction: dict[str, bool] = {}
    for s in doc.get("series", []):
        key = f"{s['step']}/{s['name']} ({s['unit']})"
        samples[key] = Sample.of(s["values"])
        direction[key] = bool(s.get("higherIsBetter", True))
    for phase in (doc.get("bootSummary") or {}):
        values = [b[phase] for b in doc.get("boots", []) if phase in b]
        if values:
            key = f"boot/{phase} (s)"
            samples[key] = Sample.of(values)
            direction[key] = False
    return samples, direction


def samples_by_metric_name(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, bool]]:
    """Like samples_from_document, keyed by 'name (unit)' only (to compare with a vendor guide)."""
    samples, direction = samples_from_document(doc)
    out: dict[str, Any] = {}
    out_dir: dict[str, bool] = {}
    for key, sample in samples.items():
        short = key.split("/", 1)[1]
        if short not in out:
            out[short], out_dir[short] = sample, direction[key]
    return out, out_dir
