"""A finished session's results, built only from its checkpoints: metrics.json, reports, the verdict.

Because everything comes from the checkpoints (never from a process's memory), a runner that was
killed and resumed produces the same documents as one that ran straight through. The figures are
the tenant's, so the session builds them in a budgeted child (`documents`, called by
`session.reporting`): pure, its arguments and its Documents pickled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from benchfarm.api.devicetype import DeviceType
from benchfarm.api.labpolicy import LabPolicySpec
from benchfarm.api.outcomes import Regression, Verdict
from benchfarm.api.runs import RepeatSpec, SuiteSpec
from benchfarm.core.statistics import conditions
from benchfarm.core.statistics.regression import (
    RegressionPolicy,
    compare,
    regression_policy,
    worst_offenders,
)
from benchfarm.core.statistics.repeat import AT_MAXIMUM, decide, interval
from benchfarm.core.statistics.results import (
    SuiteRecord,
    headline,
    metrics_document,
    series,
    summary,
)
from benchfarm.core.steps import BOOT, PROVENANCE, SUITE
from benchfarm.report.html import html
from benchfarm.report.tables import comparison_markdown, markdown, rst
from benchfarm.suites.base import Metric


@dataclass
class Collected:
    """The checkpoints of one attempt, in step order."""

    boots: list[dict[str, float]] = field(default_factory=list)
    boot_events: list[dict[str, float]] = field(default_factory=list)
    power_on_times: list[float] = field(default_factory=list)
    kernel_clocks: list[dict[str, Any] | None] = field(default_factory=list)
    boot_retries: dict[int, list[str]] = field(default_factory=dict)   # boot number -> failed
    records: list[SuiteRecord] = field(default_factory=list)
    # the attempts measured outside their envelope and taken again, by (step, iteration)
    retaken: dict[tuple[str, int], list[SuiteRecord]] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    sides: dict[str, Collected] = field(default_factory=dict)   # A/B runs: "a", "b"

    def add(self, checkpoint: dict[str, Any]) -> None:
        side = checkpoint.get("side") or ""
        if side:   # an A/B run: each side on its own, and nothing mixed across sides
            self.sides.setdefault(side, Collected()).add({**checkpoint, "side": ""})
            return
        kind = checkpoint["kind"]
        if kind == BOOT:
            self.boots.append(checkpoint["phases"])
            self.boot_events.append(checkpoint["events"])
            self.power_on_times.append(checkpoint["powerOnWall"])
            self.kernel_clocks.append(checkpoint.get("kernelClock"))
            if checkpoint.get("failedAttempts"):
                self.boot_retries[len(self.boots)] = checkpoint["failedAttempts"]
        elif kind == PROVENANCE:
            self.provenance = checkpoint["provenance"]
        elif kind == SUITE:
            r = checkpoint["record"]
            self.records.append(record_from_dict(r))
            if checkpoint.get("retaken"):
                self.retaken[(r["step"], r["iteration"])] = [
                    record_from_dict(x) for x in checkpoint["retaken"]]
            if checkpoint.get("evidence"):
                self.evidence[f"{r['step']}/{r['iteration']}"] = checkpoint["evidence"]

    def retaken_records(self) -> list[SuiteRecord]:
        """Every attempt that was taken again, in the order its iterations were checkpointed."""
        return [r for attempts in self.retaken.values() for r in attempts]


def record_from_dict(d: dict[str, Any]) -> SuiteRecord:
    return SuiteRecord(step=d["step"], suite=d["suite"], iteration=d["iteration"],
                       warmup=d["warmup"], exit_code=d["exitCode"], seconds=d["seconds"],
                       metrics=[Metric(m["name"], m["value"], m["unit"], m["higherIsBetter"],
                                      m.get("labels") or {}) for m in d["metrics"]], error=d.get("error"),
                       artifact=d.get("artifact"), conditions=d.get("conditions"))


def headline_values(records: list[SuiteRecord], suites: list[SuiteSpec]) -> dict[str, list[float]]:
    """Each step's headline metric across the measured iterations so far: what repetition watches."""
    all_series = series(records)
    out = {}
    for spec in suites:
        h = headline([x for x in all_series if x.step == spec.name], spec.suite)
        if h is not None:
            out[f"{spec.name}: {h.key}"] = h.values
    return out


def repetition(records: list[SuiteRecord], suites: list[SuiteSpec], rule: RepeatSpec,
               warmup: int) -> dict[str, Any]:
    """Why a run with spec.repeat stopped where it did, per headline metric."""
    measured = max((r.iteration - warmup for r in records if not r.warmup), default=0)
    values = headline_values(records, suites)
    verdict = decide(values, rule.relativeCI95, measured, rule.minIterations, rule.maxIterations)
    return {"target": rule.relativeCI95, "minIterations": rule.minIterations,
            "maxIterations": rule.maxIterations, "iterations": measured,
            "stoppedBecause": verdict or AT_MAXIMUM,
            "metrics": [interval(k, v).as_dict(rule.relativeCI95) for k, v in values.items()]}


def compare_with(doc: dict[str, Any], baseline_name: str, baseline_doc: dict[str, Any] | None,
                 policy: RegressionPolicy, *, title: str | None = None,
                 columns: tuple[str, str] = ("Baseline", "This run"),
                 ) -> tuple[str, tuple[str, str, str]]:
    """The comparison table and the Regressed condition (status, reason, message)."""
    from benchfarm.core.statistics.results import samples_from_document
    if baseline_doc is None:
        return "", ("Unknown", Regression.baseline_unavailable,
                    f"baseline run {baseline_name} not found, not finished or unreadable")
    current, direction = samples_from_document(doc)
    baseline, _ = samples_from_document(baseline_doc)
    comparisons = compare(baseline, current, direction, policy)
    doc["comparison"] = {"baseline": baseline_name, "rule": policy.describe(),
                         "rows": [{"key": c.key, "verdict": c.verdict, "change": c.change,
                                   "baseline": c.baseline.display, "current": c.current.display,
                                   "evidence": c.evidence} for c in comparisons]}
    table = comparison_markdown(comparisons, policy.describe(),
                                title or f"Comparison with run {baseline_name}", columns)
    bad = [c for c in comparisons if c.verdict == Verdict.regressed]
    if bad:
        return table, ("True", Regression.regressed,
                       f"{len(bad)} metric(s) worse than {baseline_name}: "
                       + worst_offenders(comparisons))
    return table, ("False", Regression.none,
                   f"{len(comparisons)} metric(s) compared with {baseline_name}; none worse")


@dataclass
class Documents:
    doc: dict[str, Any]
    results: dict[str, Any]
    failed: list[str]
    files: dict[str, tuple[bytes, str]]       # artifact name -> (bytes, content type)
    regression: tuple[str, str, str] | None
    # the steps that got no valid measurement (every attempt outside its envelope), each with
    # the first reasons why: the run ends OutsideEnvelope (session.reporting)
    unmeasured: dict[str, list[str]] = field(default_factory=dict)


def build_ab(run_info: dict[str, Any], dtype: DeviceType, suites: list[SuiteSpec],
             got: Collected, labels: dict[str, str], *, policy: LabPolicySpec | None = None
             ) -> Documents:
    """An A/B run's documents: each side's own (as a one-sided run's), and B judged against A
    by the regression rule — the Regressed condition and the A/B table."""
    sides = {}
    for key in ("a", "b"):
        label = f"{key.upper()} ({labels[key]})"
        info = {**run_info, "name": f"{run_info['name']} {label}", "software": labels[key]}
        sides[key] = build(info, dtype, suites, got.sides.get(key) or Collected())
    a, b = sides["a"], sides["b"]
    name_a, name_b = f"A ({labels['a']})", f"B ({labels['b']})"
    _, regression = compare_with(b.doc, name_a, a.doc,
                                     regression_policy(policy or LabPolicySpec()),
                                     title=f"A/B: {name_b} against {name_a}",
                                     columns=(name_a, name_b))
    status, reason, message = regression
    regression = (status, reason, message.replace(f"than {name_a}", f"on {name_b} than on "
                                                  f"{name_a}"))
    doc = {"run": {**run_info, "ab": {"a": labels["a"], "b": labels["b"]}},
           "sides": {labels["a"]: a.doc, labels["b"]: b.doc},
           "comparison": b.doc.pop("comparison", None)}
    files = {"metrics.json": (json.dumps(doc, indent=2).encode(), "application/json"),
             "report.md": (markdown(doc).encode(), "text/markdown"),
             "report.rst": (rst(doc).encode(), "text/x-rst"),
             "report.html": a.files["report.html"],
             "report-b.html": b.files["report.html"]}
    results = {labels["a"]: a.results, labels["b"]: b.results}
    unmeasured = {f"{step} on {side}": why for side, docs in ((name_a, a), (name_b, b))
                  for step, why in docs.unmeasured.items()}
    return Documents(doc, results, sorted(set(a.failed) | set(b.failed)), files, regression,
                     unmeasured)


def build(run_info: dict[str, Any], dtype: DeviceType, suites: list[SuiteSpec], got: Collected,
          *, baseline: str | None = None, baseline_doc: dict[str, Any] | None = None,
          policy: LabPolicySpec | None = None, repeat: RepeatSpec | None = None) -> Documents:
    steps = [(s.name, s.suite) for s in suites]
    results = summary(got.boots, dtype.boot.headline, got.records, steps)
    failed = sorted({r.step for r in got.records if not r.ok})
    run_info = {**run_info, "uname": got.provenance.get("uname"),
                "result": "suites failed: " + ", ".join(failed) if failed else "all suites passed"}
    simulated = bool(dtype.conditions is not None and dtype.conditions.simulated)
    retaken = got.retaken_records()
    doc = metrics_document(run_info, got.boots, got.records, retaken, simulated=simulated)
    doc["provenance"] = got.provenance
    doc["bootEvents"] = got.boot_events
    doc["powerOnTimes"] = got.power_on_times
    doc["kernelClocks"] = got.kernel_clocks
    if got.boot_retries:
        doc["bootRetries"] = {str(n): failed for n, failed in got.boot_retries.items()}
    if got.evidence:
        doc["evidence"] = got.evidence
    if repeat is not None:
        doc["repeat"] = repetition(got.records, suites, repeat,
                                   int(run_info.get("warmupIterations") or 0))
        results["repeat"] = {"iterations": doc["repeat"]["iterations"],
                             "stoppedBecause": doc["repeat"]["stoppedBecause"]}
    regression = None
    comparison_md = ""
    if baseline:
        comparison_md, regression = compare_with(doc, baseline, baseline_doc,
                                                 regression_policy(policy or LabPolicySpec()))
    report_md = markdown(doc) + ("\n" + comparison_md if comparison_md else "")
    files = {"metrics.json": (json.dumps(doc, indent=2).encode(), "application/json"),
             "report.md": (report_md.encode(), "text/markdown"),
             "report.rst": (rst(doc).encode(), "text/x-rst"),
             "report.html": (html(doc).encode(), "text/html")}
    unmeasured = conditions.unmeasured(conditions.attempts(doc["records"], doc["retaken"]))
    return Documents(doc, results, failed, files, regression, unmeasured)


def documents(run_info: dict[str, Any], dtype: DeviceType, suites: list[SuiteSpec],
              got: Collected, labels: dict[str, str] | None, baseline: str | None,
              baseline_doc: dict[str, Any] | None, policy: LabPolicySpec | None,
              repeat: RepeatSpec | None) -> Documents:
    """The run's documents: an A/B run's (`labels`: each side's label by "a" and "b") or a
    one-sided run's; what the session's budgeted child runs."""
    if labels is not None:
        return build_ab(run_info, dtype, suites, got, labels, policy=policy)
    return build(run_info, dtype, suites, got, baseline=baseline, baseline_doc=baseline_doc,
                 policy=policy, repeat=repeat)
