"""A finished run as CI systems read it: JUnit XML, a JSON summary, and a KCIDB v5 document.

Pure: built from the BenchmarkRun as the API server returns it, its metrics.json (None when it
failed before it had results) and `core.statistics.gate`'s decision. The three formats come from one
`Outcome`, so a step, a figure or a verdict reads the same in each.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchfarm.api.outcomes import Blame, Condition, Phase, Verdict
from benchfarm.api.runs import ARTIFACT_PARTS, BenchmarkRunStatus
from benchfarm.core.statistics.gate import Decision, Exit, decide

ORIGIN = "benchfarm"
# What XML 1.0 cannot hold even escaped (C0 controls but tab and line breaks, lone surrogates,
# U+FFFE/U+FFFF): a console line with an escape sequence in a step's error would make the whole
# JUnit file unreadable to the CI that collects it. Each becomes U+FFFD.
_NOT_XML = {c: "\ufffd" for c in (*range(0x20), *range(0xD800, 0xE000), 0xFFFE, 0xFFFF)
            if c not in (0x09, 0x0A, 0x0D)}
KCIDB_VERSION = {"major": 5, "minor": 3}


@dataclass(frozen=True)
class Figure:
    """One metric of a step (or a boot phase) across the measured iterations."""

    step: str
    name: str
    unit: str
    values: tuple[float, ...]
    higher_is_better: bool
    display: str = ""

    @property
    def key(self) -> str:
        """As metrics.json's comparison rows name it."""
        return f"{self.step}/{self.name} ({self.unit})"

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values) if self.values else 0.0


@dataclass(frozen=True)
class Step:
    name: str
    suite: str
    runs: int = 0
    seconds: float = 0.0
    errors: tuple[str, ...] = ()
    figures: tuple[Figure, ...] = ()


@dataclass(frozen=True)
class VerdictRow:
    key: str
    verdict: str
    change: float
    baseline: str
    current: str
    evidence: str


@dataclass(frozen=True)
class Outcome:
    namespace: str
    name: str
    uid: str
    plan: str
    device_type: str
    board: str
    decision: Decision
    steps: tuple[Step, ...] = ()
    boot: tuple[Figure, ...] = ()
    verdicts: tuple[VerdictRow, ...] = ()
    baseline: str = ""
    software: Mapping[str, Any] = field(default_factory=dict)   # spec.software(B) as given
    compatible: tuple[str, ...] = ()
    finished_at: str = ""
    artifacts: tuple[str, ...] = ()

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def _figures(doc: Mapping[str, Any], prefix: str = "") -> list[Figure]:
    return [Figure(prefix + s["step"], s["name"], s.get("unit", ""),
                   tuple(float(v) for v in s.get("values") or ()),
                   bool(s.get("higherIsBetter", True)), s.get("display", ""))
            for s in doc.get("series") or ()]


def _boot(doc: Mapping[str, Any], prefix: str = "") -> list[Figure]:
    out = []
    for phase, summary in (doc.get("bootSummary") or {}).items():
        values = tuple(float(b[phase]) for b in doc.get("boots") or () if phase in b)
        out.append(Figure(prefix + "boot", phase, "s", values, False,
                          str(summary.get("display", ""))))
    return out


def _steps(suites: Sequence[Mapping[str, Any]], doc: Mapping[str, Any] | None,
           prefix: str = "") -> list[Step]:
    figures = _figures(doc or {}, prefix)
    records = (doc or {}).get("records") or ()
    out = []
    for s in suites:
        name = s["name"]
        mine = [r for r in records if r.get("step") == name and not r.get("warmup")]
        out.append(Step(prefix + name, s.get("suite", ""), len(mine),
                        round(sum(float(r.get("seconds") or 0) for r in mine), 3),
                        tuple(f"iteration {r.get('iteration')}: {r['error']}"
                              for r in mine if r.get("error")),
                        tuple(f for f in figures if f.step == prefix + name)))
    return out


def outcome(body: Mapping[str, Any], doc: Mapping[str, Any] | None,
            decision: Decision) -> Outcome:
    """The run `body` (as read from the API server) with its metrics.json `doc`."""
    meta, spec = body.get("metadata") or {}, body.get("spec") or {}
    status = BenchmarkRunStatus.of(body.get("status"))
    suites = status.resolvedSuites or spec.get("suites") or []
    info = (doc or {}).get("run") or {}
    if doc is not None and "sides" in doc:     # an A/B run: each side's steps, by its label
        steps: list[Step] = []
        boot: list[Figure] = []
        for label, side in doc["sides"].items():
            steps += _steps(suites, side, f"{label}/")
            boot += _boot(side, f"{label}/")
    else:
        steps, boot = _steps(suites, doc), _boot(doc or {})
    comparison = (doc or {}).get("comparison") or {}
    verdicts = tuple(VerdictRow(str(r.get("key")), str(r.get("verdict")),
                                float(r.get("change") or 0.0), str(r.get("baseline", "")),
                                str(r.get("current", "")), str(r.get("evidence", "")))
                     for r in comparison.get("rows") or ())
    provenance = (doc or {}).get("provenance") or {}
    compatible = provenance.get("compatible") or ()
    return Outcome(
        namespace=meta.get("namespace", ""), name=meta.get("name", ""),
        uid=meta.get("uid", ""), plan=spec.get("plan") or "inline",
        device_type=info.get("deviceType") or (spec.get("selector") or {}).get("deviceType")
        or "", board=status.board or info.get("board") or "", decision=decision,
        steps=tuple(steps), boot=tuple(boot), verdicts=verdicts,
        baseline=str(comparison.get("baseline") or spec.get("baseline") or ""),
        software={k: spec[k] for k in ("software", "softwareB") if spec.get(k)},
        compatible=tuple(str(c) for c in compatible if isinstance(c, str)),
        finished_at=status.completionTime or info.get("finishedAt") or "",
        artifacts=tuple(status.artifacts or ()))


def decided_outcome(body: Mapping[str, Any], doc: Mapping[str, Any] | None, *,
                    unread: str = "", interrupted: bool = False) -> Outcome:
    """The finished run `body`'s outcome, its exit code decided from its status and `doc`'s
    comparison. A run that succeeded without a readable metrics.json is the lab's fault
    (`unread` says why it could not be read, when it says)."""
    status = body.get("status") or {}
    rows = ((doc or {}).get("comparison") or {}).get("rows") or []
    decision = decide(status, rows, baseline=(body.get("spec") or {}).get("baseline"),
                      interrupted=interrupted)
    if BenchmarkRunStatus.of(status).phase == Phase.succeeded and doc is None:
        decision = Decision(Exit.lab, "the run succeeded but its metrics.json could not be "
                            f"read from the store{unread} (the lab's fault; retry later)",
                            decision.reason)
    return outcome(body, doc, decision)


# -- JUnit -------------------------------------------------------------------------------------

def _properties(parent: ET.Element, props: Iterable[tuple[str, Any]]) -> None:
    items = [(k, v) for k, v in props if v not in (None, "")]
    if items:
        el = ET.SubElement(parent, "properties")
        for k, v in items:
            ET.SubElement(el, "property", name=k, value=str(v))


def _figure_props(f: Figure) -> list[tuple[str, Any]]:
    if not f.values:
        return [(f"{f.name} ({f.unit})", "no values")]
    return [(f"{f.name} ({f.unit})", f.display or f"{f.mean:.6g}"),
            (f"{f.name}.mean", f"{f.mean:.6g}"), (f"{f.name}.min", f"{min(f.values):.6g}"),
            (f"{f.name}.max", f"{max(f.values):.6g}"), (f"{f.name}.n", len(f.values)),
            (f"{f.name}.unit", f.unit)]


def junit(outcomes: Sequence[Outcome]) -> bytes:
    """JUnit XML: a test suite per run, a test case per suite step (its figures as properties,
    a failure when an iteration failed), per boot phase and per regression verdict (a failure
    when the metric regressed); a run that ended without results is one case that errs (the
    lab's fault) or fails (the run's)."""
    root = ET.Element("testsuites", name="benchfarm")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for o in outcomes:
        suite = ET.SubElement(root, "testsuite", name=o.ref, timestamp=o.finished_at)
        _properties(suite, [("run", o.ref), ("uid", o.uid), ("plan", o.plan),
                            ("deviceType", o.device_type), ("board", o.board),
                            ("baseline", o.baseline), ("exitCode", int(o.decision.code)),
                            ("reason", o.decision.reason), ("verdict", o.decision.why),
                            *_software_props(o.software)])
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        cls = f"benchfarm.{o.plan}"
        for step in o.steps:
            case = ET.SubElement(suite, "testcase", classname=cls, name=step.name,
                                 time=f"{step.seconds:.3f}")
            counts["tests"] += 1
            _properties(case, [("suite", step.suite), ("iterations", step.runs),
                               *[p for f in step.figures for p in _figure_props(f)]])
            if step.errors:
                counts["failures"] += 1
                ET.SubElement(case, "failure", type="SuiteFailed",
                              message=step.errors[0][:500]).text = "\n".join(step.errors)
            elif not step.runs:
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message="not run: " + o.decision.why[:300])
        for f in o.boot:
            case = ET.SubElement(suite, "testcase", classname=f"{cls}.boot",
                                 name=f"{f.step}/{f.name}")
            counts["tests"] += 1
            _properties(case, _figure_props(f))
        for v in o.verdicts:
            case = ET.SubElement(suite, "testcase", classname="benchfarm.regression",
                                 name=v.key)
            counts["tests"] += 1
            _properties(case, [("verdict", v.verdict), ("change", f"{v.change:+.4f}"),
                               ("baseline", v.baseline), ("current", v.current),
                               ("evidence", v.evidence), ("baselineRun", o.baseline)])
            if v.verdict == Verdict.regressed:
                counts["failures"] += 1
                ET.SubElement(case, "failure", type=Condition.regressed,
                              message=f"{v.key} {v.change:+.1%} against {o.baseline}: "
                                      f"{v.evidence}")
        if o.decision.code in (Exit.lab, Exit.run, Exit.interrupted) and not any(
                s.errors for s in o.steps):
            case = ET.SubElement(suite, "testcase", classname="benchfarm.run", name=o.ref)
            counts["tests"] += 1
            kind = "failure" if o.decision.blame == Blame.run else "error"
            counts["failures" if kind == "failure" else "errors"] += 1
            ET.SubElement(case, kind, type=o.decision.reason or "Unknown",
                          message=o.decision.why[:500])
        for k, n in counts.items():
            suite.set(k, str(n))
            if k in totals:
                totals[k] += n
    for k, n in totals.items():
        root.set(k, str(n))
    ET.indent(root)
    text = ET.tostring(root, encoding="unicode").translate(_NOT_XML)
    return ("<?xml version='1.0' encoding='utf-8'?>\n" + text).encode()


def _software_props(software: Mapping[str, Any]) -> list[tuple[str, Any]]:
    out = []
    for side, sw in software.items():
        for part in ARTIFACT_PARTS:
            art = sw.get(part) or {}
            if art:
                out.append((f"{side}.{part}", art.get("url")))
                out.append((f"{side}.{part}.sha256", art.get("sha256") or art.get("sha256Url")))
        if sw.get("bootArgs"):
            out.append((f"{side}.bootArgs", sw["bootArgs"]))
    return out


# -- JSON --------------------------------------------------------------------------------------

def _finite(v: float) -> float | None:
    """A figure as JSON can hold it: inf and nan are not JSON (json.dumps writes Infinity)."""
    return v if math.isfinite(v) else None


def _figure_json(f: Figure) -> dict[str, Any]:
    return {"step": f.step, "name": f.name, "unit": f.unit, "key": f.key,
            "higherIsBetter": f.higher_is_better, "values": [_finite(v) for v in f.values],
            "mean": _finite(f.mean) if f.values else None, "display": f.display}


def summary(o: Outcome) -> dict[str, Any]:
    """`--json`: the run's metrics and verdicts, and what the exit code says."""
    d = o.decision
    return {"run": o.ref, "uid": o.uid, "plan": o.plan, "deviceType": o.device_type,
            "board": o.board, "finishedAt": o.finished_at, "software": dict(o.software),
            "exitCode": int(d.code), "blame": d.blame.value if d.blame else None,
            "reason": d.reason, "why": d.why, "regressed": list(d.regressed),
            "baseline": o.baseline or None,
            "steps": [{"name": s.name, "suite": s.suite, "iterations": s.runs,
                       "seconds": s.seconds, "errors": list(s.errors)} for s in o.steps],
            "metrics": [_figure_json(f) for s in o.steps for f in s.figures],
            "boot": [_figure_json(f) for f in o.boot],
            "verdicts": [{"key": v.key, "verdict": v.verdict, "change": v.change,
                          "baseline": v.baseline, "current": v.current,
                          "evidence": v.evidence} for v in o.verdicts],
            "artifacts": list(o.artifacts)}


# -- KCIDB v5 ----------------------------------------------------------------------------------

def _path_part(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_-]+", "_", text).strip("_") or "x"


def _software_id(o: Outcome) -> str:
    digests = {side: {p: (sw.get(p) or {}).get("sha256") or (sw.get(p) or {}).get("url")
                      for p in ARTIFACT_PARTS if sw.get(p)}
               | ({"bootArgs": sw["bootArgs"]} if sw.get("bootArgs") else {})
               for side, sw in o.software.items()}
    if not digests:     # the board's own image: nothing to name it by but the run
        return f"image-{_path_part(o.device_type)}-{o.uid}"
    blob = json.dumps(digests, sort_keys=True).encode()
    return "sw-" + hashlib.sha256(blob).hexdigest()[:32]


def _status(o: Outcome, key: str | None) -> str:
    if o.decision.code == Exit.lab or o.decision.code == Exit.interrupted:
        return "MISS"
    verdict = next((v.verdict for v in o.verdicts if v.key == key), None)
    if verdict == Verdict.regressed:
        return "FAIL"
    if verdict in (Verdict.unchanged, Verdict.improved):
        return "PASS"
    return "DONE"


def kcidb(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """A KCIDB v5 report: the software each run booted as a checkout and a build (its
    artifacts and their digests), each metric (and boot phase) a test with `number {value,
    unit}` (the mean; the values in misc), the board as environment (its device tree's
    compatible when known, the device type otherwise), the verdict as status (FAIL regressed,
    PASS compared and not worse, DONE measured with nothing to compare with, MISS the lab's
    fault); a failed step or run is a test of its own (FAIL the run's fault)."""
    checkouts: dict[str, dict[str, Any]] = {}
    builds: dict[str, dict[str, Any]] = {}
    tests: list[dict[str, Any]] = []
    for o in outcomes:
        sw = _software_id(o)
        checkout_id = build_id = f"{ORIGIN}:{sw}"
        checkouts.setdefault(checkout_id, {
            "id": checkout_id, "origin": ORIGIN, "valid": True,
            "comment": "software under test" if o.software else
                       f"the board's own image ({o.device_type})",
            "misc": {"software": dict(o.software)}})
        files = [{"name": f"{side}-{part}", "url": art["url"]}
                 for side, s in o.software.items() for part in ARTIFACT_PARTS
                 if (art := s.get(part))]
        build: dict[str, Any] = {"id": build_id, "origin": ORIGIN, "checkout_id": checkout_id,
                                 "status": "PASS",
                                 "misc": {"software": dict(o.software)}}
        if files:
            build["output_files"] = files
        builds.setdefault(build_id, build)
        env: dict[str, Any] = {"comment": f"{o.device_type} board {o.board}".strip(),
                               "misc": {"deviceType": o.device_type, "board": o.board}}
        if o.compatible:
            env["compatible"] = list(o.compatible)
        base = f"{ORIGIN}:{o.uid or o.ref}"
        common = {"origin": ORIGIN, "build_id": build_id, "environment": env}
        if o.finished_at:
            common["start_time"] = o.finished_at
        run_misc = {"run": o.ref, "plan": o.plan, "baseline": o.baseline or None,
                    "exitCode": int(o.decision.code)}
        figures = [f for s in o.steps for f in s.figures] + list(o.boot)
        for f in figures:
            if not f.values or not math.isfinite(f.mean):    # KCIDB's number is finite
                continue
            tests.append({**common, "id": f"{base}:{f.key}",
                          "path": ".".join([ORIGIN, _path_part(o.plan)]
                                           + [_path_part(p) for p in f.step.split("/")]
                                           + [_path_part(f.name)]),
                          "status": _status(o, f.key),
                          "number": {"value": f.mean, "unit": f.unit},
                          "misc": {**run_misc, "values": [_finite(v) for v in f.values],
                                   "higherIsBetter": f.higher_is_better}})
        for s in o.steps:
            if s.errors:
                tests.append({**common, "id": f"{base}:{s.name}",
                              "path": ".".join([ORIGIN, _path_part(o.plan)]
                                               + [_path_part(p) for p in s.name.split("/")]),
                              "status": "FAIL", "log_excerpt": "\n".join(s.errors)[:16000],
                              "misc": run_misc})
        if o.decision.code in (Exit.lab, Exit.run, Exit.interrupted) and not figures:
            tests.append({**common, "id": f"{base}:run", "path": f"{ORIGIN}.{_path_part(o.plan)}",
                          "status": "FAIL" if o.decision.blame == Blame.run else "MISS",
                          "comment": o.decision.why[:1000], "misc": run_misc})
    return {"version": dict(KCIDB_VERSION), "checkouts": list(checkouts.values()),
            "builds": list(builds.values()), "tests": tests}
