"""BenchmarkBisection: from a change point to the build that caused it, on one board.

A bisection names a metric, a plan, a board selector, the good build and the builds after it in
order (the last is the bad one). The operator measures one build at a time against the good one
in A/B BenchmarkRuns of the bisection's namespace (owned by it, queued like any other run, under
the same LabPolicy checks of their software), all on the board its first run got; a step takes
as many pairs as its verdict needs (`core.bisection.judge`), the next build is the search's
(`core.bisection.search`), and the finished runs are the steps' checkpoints: the operator reads
the whole course back from them. What the operator, `kubectl` and `benchfarm bisect` agree on
about a bisection is defined here.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import ConfigDict, Field

from benchfarm.api.base import Condition, Model, Name, Status
from benchfarm.api.boards import BoardSelector
from benchfarm.api.outcomes import BisectionAnswer, StepVerdict
from benchfarm.api.runs import SoftwareSet

BISECTION_LABEL = "benchfarm.io/bisection"          # on its runs: the bisection's name
BISECTION_UID_LABEL = "benchfarm.io/bisection-uid"
BUILD_LABEL = "benchfarm.io/bisection-build"        # the build a run measures: 0..n-1
BATCH_LABEL = "benchfarm.io/bisection-batch"        # 1, 2, ...: the runs of one build's step
MAX_LAB_FAULTS = 3       # a step's runs that the lab failed (not the build) before it gives up

MetricKey = Annotated[str, Field(min_length=3, max_length=200, pattern=r"^[^\x00-\x1f]+ \([^()]+\)$")]


class BenchmarkBisectionSpec(Model):
    metric: MetricKey = Field(description=(
        "The metric to bisect, as the run's results name it: 'NAME (UNIT)', e.g. "
        "'hackbench time (s)'."))
    higherIsBetter: bool | None = Field(None, description=(
        "Whether a larger figure is better (default: from the unit, as in every comparison)."))
    plan: Name = Field(description="The TestPlan each step runs.")
    selector: BoardSelector = Field(description=(
        "The boards that may run it: the first step's board runs every step."))
    good: SoftwareSet = Field(description="The last good build: every step's reference (A).")
    builds: list[SoftwareSet] = Field(min_length=1, max_length=256, description=(
        "The builds after the good one, in order; the last is the bad one. Each is named (its "
        "revision in the record `benchfarm bisect log` prints)."))
    threshold: float = Field(0.05, ge=0.001, le=1.0, description=(
        "The smallest slowdown that counts, relative (0.05: 5 % worse than the good build)."))
    pairsPerRun: int = Field(3, ge=1, le=50, description=(
        "A/B pairs (iterations) a step's run measures; a step adds runs until its verdict is "
        "confident or it has maxPairs."))
    maxPairs: int = Field(12, ge=3, le=200, description="A step's bound: unclear past it.")
    priority: int = Field(100, ge=0, le=1000, description="Priority of the step runs.")
    timeoutSeconds: int = Field(3600, ge=10, le=7 * 86400, description="Per step run.")
    cancel: bool = Field(False, description="Cancel the step that runs; keep what was found.")


BISECTION_SPEC_RULES = [
    {"rule": "has(self.selector.deviceType) || has(self.selector.board)",
     "message": "selector needs deviceType or board"},
    {"rule": "size(self.good.name) > 0 && self.builds.all(b, size(b.name) > 0)",
     "message": "name the good build and every build (a revision or a build's label)"},
    {"rule": "self.builds.all(b, b.name != self.good.name && "
             "self.builds.exists_one(c, c.name == b.name))",
     "message": "build names must be unique, and none the good build's"},
    {"rule": "self.pairsPerRun <= self.maxPairs",
     "message": "pairsPerRun must not exceed maxPairs"},
]


class BisectionReason(StrEnum):
    """The reasons of a bisection's Succeeded condition."""

    running = "Bisecting"
    culprit = "CulpritFound"             # one build: the first bad one
    range = "RangeFound"                 # the first bad build is one of several (skipped, unclear)
    no_change = "NoChange"               # every build up to the bad one measured good
    inconclusive = "Inconclusive"        # none measured bad; skipped or unclear ones may hold it
    cancelled = "Cancelled"
    run_refused = "RunRefused"           # the API server (schema, policy) refused a step's run
    run_failed = "RunFailed"             # a step's run failed on the bisection's own input
    lab_faults = "LabFaults"             # a step's runs failed on the lab MAX_LAB_FAULTS times
    metric_missing = "MetricMissing"     # a step's run has no pairs of the metric
    invalid_spec = "InvalidSpec"

    @classmethod
    def of(cls, answer: BisectionAnswer) -> BisectionReason:
        return {BisectionAnswer.culprit: cls.culprit, BisectionAnswer.range: cls.range,
                BisectionAnswer.no_change: cls.no_change,
                BisectionAnswer.inconclusive: cls.inconclusive}[answer]


class StepStatus(Model):
    """One step: a build measured against the good one, in the order the search took them."""

    model_config = ConfigDict(extra="allow")
    build: int
    name: str
    verdict: StepVerdict | None = None     # None: still measuring
    pairs: int = 0
    effect: float | None = None            # relative, worse positive
    ci95: list[float | None] = Field(default_factory=list)
    runs: list[str] = Field(default_factory=list)
    labFaults: int = 0
    message: str = ""


class AnswerStatus(Model):
    model_config = ConfigDict(extra="allow")
    kind: BisectionAnswer
    firstBad: str | None = None
    suspects: list[str] = Field(default_factory=list)
    lastGood: str = ""
    effect: float | None = None            # the first bad build's step
    ci95: list[float | None] = Field(default_factory=list)


class BenchmarkBisectionStatus(Status):
    """`status` of a BenchmarkBisection (`operator.bisections` writes it); read as `.of`."""

    phase: str | None = Field(None, description="Pending, Running, Succeeded, Failed or Cancelled.")
    conditions: list[Condition] = Field(default_factory=list)
    board: str | None = Field(None, description="The board every step runs on (the first's).")
    steps: list[StepStatus] = Field(default_factory=list)
    answer: AnswerStatus | None = None
    pairs: int = Field(0, description="A/B pairs measured, all steps.")
    boardSeconds: float | None = Field(None, description="Board time of its runs, all steps.")
    maxSteps: int | None = Field(None, description="The search's bound: ceil(log2(n+1)) + skips.")
    observedGeneration: int | None = None
