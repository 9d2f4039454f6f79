"""What a bisection needs next, from its spec and the runs it has made: pure, so every course
(pairs, skips, lab faults, a cancel, an operator restarted anywhere) is tested without a cluster;
`operator.bisections` does the reading and writing.

The runs are the checkpoints. The search is replayed from the first step every time: the build
the search names next (`search.next_build`) is looked up among the runs (labelled with its
index and its batch); its finished runs' pairs give its verdict (`judge`), or another run of
`pairsPerRun` pairs when the pairs do not yet decide; a run the build failed (it did not boot,
its suite failed, it took the board down) is the build's `skip`; a run the lab failed is made
again (`MAX_LAB_FAULTS` at most); a run still going ends the replay there. So a restarted
operator, or a killed session whose run resumes, never redoes a finished step. Every run after
the first holds the board the first one got (its selector names it), so every step is measured
on the same board; a run the lab failed on it unpins it (that board may be what failed): the
step is measured again on whichever board of the selector its next run gets, every later step
there too. Each run measures the good build beside the candidate, so a step's pairs, all of its
newest board, hold their own reference.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchfarm.api.base import GROUP, VERSION
from benchfarm.api.bisections import (
    BATCH_LABEL,
    BISECTION_LABEL,
    BISECTION_UID_LABEL,
    BUILD_LABEL,
    MAX_LAB_FAULTS,
    AnswerStatus,
    BenchmarkBisectionSpec,
    BisectionReason,
    StepStatus,
)
from benchfarm.api.outcomes import FINISHED, Blame, Condition, Phase, Reason, StepVerdict, blame
from benchfarm.api.runs import BenchmarkRunStatus
from benchfarm.core.bisection.judge import Judgement, judge
from benchfarm.core.bisection.search import Answer, answer, max_steps, next_build
from benchfarm.core.statistics.measured import iteration_values
from benchfarm.core.statistics.regression import higher_is_better_for, unit_of

#: a run that failed so is the build's fault: the step is the build's skip
BUILD_FAULTS = frozenset({Reason.software_boot_failed, Reason.suites_failed,
                          Reason.run_crashed_board})

Pairs = list[tuple[float, float]]


@dataclass
class Plan:
    steps: list[StepStatus]
    board: str | None = None
    create: list[dict[str, Any]] = field(default_factory=list)   # BenchmarkRun bodies
    cancel: list[str] = field(default_factory=list)              # names of runs to cancel
    found: Answer | None = None
    failure: tuple[BisectionReason, str] | None = None           # the bisection ends Failed
    max_steps: int = 0

    @property
    def finished(self) -> bool:
        return self.found is not None or self.failure is not None

    @property
    def pairs(self) -> int:
        return sum(s.pairs for s in self.steps)


def run_name(bisection: str, build: int, batch: int) -> str:
    """`<bisection>-<build>-<batch>` within Kubernetes' 63 characters (a long name keeps its start
    and a digest of the whole)."""
    name = f"{bisection}-{build}-{batch}"
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:40].rstrip('-')}-{digest}-{build}-{batch}"


def pairs_of(doc: Mapping[str, Any] | None, metric: str, good: str, build: str) -> Pairs | None:
    """The (good, build) pairs of the metric in an A/B run's metrics.json, by iteration; None when
    the document or either side's metric is missing."""
    sides = (doc or {}).get("sides")
    if not isinstance(sides, Mapping) or not isinstance(sides.get(good), Mapping) or \
            not isinstance(sides.get(build), Mapping):
        return None
    a, b = iteration_values(sides[good], metric), iteration_values(sides[build], metric)
    if not a or not b:
        return None
    return [(a[i], b[i]) for i in sorted(a.keys() & b.keys())]


def run_body(bisection: Mapping[str, Any], spec: BenchmarkBisectionSpec, build: int, batch: int,
             pairs: int, board: str | None) -> dict[str, Any]:
    meta = bisection["metadata"]
    selector = ({"board": board} if board else
                spec.selector.model_dump(exclude_none=True, exclude_defaults=True))
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "BenchmarkRun",
        "metadata": {
            "name": run_name(meta["name"], build, batch), "namespace": meta["namespace"],
            "labels": {BISECTION_LABEL: meta["name"], BISECTION_UID_LABEL: meta["uid"],
                       BUILD_LABEL: str(build), BATCH_LABEL: str(batch)},
            "ownerReferences": [{"apiVersion": f"{GROUP}/{VERSION}", "kind": "BenchmarkBisection",
                                 "name": meta["name"], "uid": meta["uid"], "controller": True}]},
        "spec": {"selector": selector, "plan": spec.plan, "iterations": pairs,
                 "priority": spec.priority, "timeoutSeconds": spec.timeoutSeconds,
                 "software": spec.good_build.model_dump(exclude_none=True, exclude_defaults=True),
                 "softwareB": spec.builds[build].model_dump(exclude_none=True,
                                                            exclude_defaults=True)}}


def _lab_failed(seen: BenchmarkRunStatus) -> bool:
    """Whether a finished run failed on the lab (or was cancelled), not on its build."""
    reason = _why(seen)[0]
    return seen.phase in FINISHED and seen.phase != Phase.succeeded and (
        reason not in BUILD_FAULTS and (blame(reason) == Blame.lab or seen.phase == Phase.cancelled))


def _board(runs: Iterable[Mapping[str, Any]]) -> str | None:
    """Where the next run goes: the board of the newest run that got one and that the lab did
    not fail. A run the lab failed on that board unpins it (the board may be what failed): the
    next run goes to any board of the selector, and the runs after it to the board it got; a
    step's pairs are those of its newest board's runs (`plan`), each pair measuring the
    reference there too."""
    board = None
    for run in sorted(runs, key=lambda r: r["metadata"].get("creationTimestamp") or ""):
        seen = BenchmarkRunStatus.of(run.get("status"))
        if _lab_failed(seen):
            board = None if seen.board == board else board
        elif seen.board:
            board = seen.board
    return board


def _why(status: BenchmarkRunStatus) -> tuple[str, str]:
    for c in status.conditions:
        if c.type == Condition.succeeded:
            return c.reason, c.message
    return status.phase or "", ""


def _index(uid: str, runs: Sequence[Mapping[str, Any]]) -> dict[int, dict[int, Mapping[str, Any]]]:
    """build -> batch -> run, of this bisection's runs (not an older one's of the same name)."""
    out: dict[int, dict[int, Mapping[str, Any]]] = {}
    for r in runs:
        labels = r["metadata"].get("labels") or {}
        if labels.get(BISECTION_UID_LABEL) != uid:
            continue
        try:
            build, batch = int(labels.get(BUILD_LABEL, "")), int(labels.get(BATCH_LABEL, ""))
        except ValueError:
            continue
        out.setdefault(build, {})[batch] = r
    return out


def plan(bisection: Mapping[str, Any], spec: BenchmarkBisectionSpec,
         runs: Sequence[Mapping[str, Any]],
         pairs: Callable[[Mapping[str, Any], int], Pairs | None]) -> Plan:
    """The steps as they stand, the run to make (at most one: one board), the runs to cancel, and
    the answer or the failure once there is one. `pairs(run, build)`: the pairs a succeeded run
    measured (None: its document or the metric is missing)."""
    n = len(spec.builds)
    higher = spec.higherIsBetter if spec.higherIsBetter is not None else higher_is_better_for(
        unit_of(spec.metric))
    by_build = _index(bisection["metadata"]["uid"], runs)
    out = Plan([], board=_board(r for batches in by_build.values() for r in batches.values()))
    verdicts: dict[int, StepVerdict] = {}
    while (build := next_build(n, verdicts)) is not None:
        step = StepStatus(build=build, name=spec.builds[build].name)
        out.steps.append(step)
        have: Pairs = []
        measured_on = None          # the board of `have`: pairs of another are measured again
        batches = by_build.get(build, {})
        for batch in sorted(batches):
            run = batches[batch]
            step.runs.append(run["metadata"]["name"])
            seen = BenchmarkRunStatus.of(run.get("status"))
            if seen.phase not in FINISHED:
                if spec.cancel and not (run.get("spec") or {}).get("cancel"):
                    out.cancel.append(run["metadata"]["name"])
                return _unfinished(out, spec, verdicts)
            reason, message = _why(seen)
            if seen.phase == Phase.succeeded:
                got = pairs(run, build)
                if got is None:
                    out.failure = (BisectionReason.metric_missing,
                                   f"run {run['metadata']['name']} has no pairs of {spec.metric}")
                    return out
                if seen.board != measured_on and have:
                    have, step.message = [], (f"measured again on {seen.board} after a lab "
                                              f"fault on {measured_on}")
                have, measured_on = have + got, seen.board
            elif reason in BUILD_FAULTS:
                step.verdict, step.message = StepVerdict.skip, f"{reason}: {message}"
                break
            elif _lab_failed(seen):     # the lab's fault (or someone cancelled it): measure it again
                step.labFaults += 1
                step.message = f"{reason}: {message}"
            else:
                out.failure = (BisectionReason.run_failed,
                               f"run {run['metadata']['name']}: {reason}: {message}")
                return out
        if step.verdict is None:
            judged = judge(have, higher, spec.threshold, spec.maxPairs)
            _record(step, judged)
            if judged.verdict is None:
                if step.labFaults >= MAX_LAB_FAULTS:
                    out.failure = (BisectionReason.lab_faults,
                                   f"build {step.name}: {step.labFaults} runs failed on the lab "
                                   f"(last: {step.message})")
                    return out
                if spec.cancel:
                    return _unfinished(out, spec, verdicts)
                batch = max(batches, default=0) + 1
                want = min(spec.pairsPerRun, spec.maxPairs - len(have))
                out.create.append(run_body(bisection, spec, build, batch, want, out.board))
                step.runs.append(run_name(bisection["metadata"]["name"], build, batch))
                return _unfinished(out, spec, verdicts)
        assert step.verdict is not None
        verdicts[build] = step.verdict
    out.found = answer(n, verdicts)
    out.max_steps = max_steps(n, sum(v in (StepVerdict.skip, StepVerdict.unclear)
                                     for v in verdicts.values()))
    return out


def _record(step: StepStatus, judged: Judgement) -> None:
    step.verdict, step.pairs = judged.verdict, judged.pairs
    step.effect, step.ci95 = judged.figures()


def _unfinished(out: Plan, spec: BenchmarkBisectionSpec, verdicts: Mapping[int, StepVerdict]) -> Plan:
    out.max_steps = max_steps(len(spec.builds), sum(
        v in (StepVerdict.skip, StepVerdict.unclear) for v in verdicts.values()))
    return out


def answer_status(spec: BenchmarkBisectionSpec, p: Plan) -> AnswerStatus | None:
    """The answer as the status says it: builds by name, the first bad build's effect."""
    if p.found is None:
        return None
    names = [b.name for b in spec.builds]
    first = next((s for s in p.steps if p.found.first_bad is not None
                  and s.build == p.found.first_bad), None)
    return AnswerStatus(
        kind=p.found.kind, firstBad=names[p.found.first_bad] if p.found.first_bad is not None
        else None, suspects=[names[i] for i in p.found.suspects],
        lastGood=names[p.found.last_good] if p.found.last_good >= 0 else spec.good_build.name,
        effect=first.effect if first else None, ci95=first.ci95 if first else [])
