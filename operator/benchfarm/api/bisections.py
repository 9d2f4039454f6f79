"""BenchmarkBisection: from a change point to the build that caused it, on one board.

A bisection names a metric, a plan, a board selector, the good build and the builds after it in
order (the last is the bad one): each a software set, or one software set whose URLs hold
`{rev}` (`template`) and the revisions to put there (`goodRevision`, `revisions`), as a CI
publishes its builds (`.../builds/{rev}/Image` with `.../builds/{rev}/SHA256SUMS`). The
operator measures one build at a time against the good one in A/B BenchmarkRuns of the
bisection's namespace (owned by it, queued like any other run, under the same LabPolicy checks
of their software), all on the board its first run got (another after a lab fault there); a
step takes as many pairs as its verdict needs (`core.bisection.judge`), the next build is the
search's (`core.bisection.search`), and the finished runs are the steps' checkpoints: the
operator reads the whole course back from them. What the operator, `kubectl` and `benchfarm
bisect` agree on about a bisection is defined here.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import ConfigDict, Field, model_validator

from benchfarm.api.base import Condition, Model, Name, Status
from benchfarm.api.boards import BoardSelector
from benchfarm.api.outcomes import BisectionAnswer, StepVerdict
from benchfarm.api.runs import ARTIFACT_PARTS, SoftwareSet

BISECTION_LABEL = "benchfarm.io/bisection"          # on its runs: the bisection's name
BISECTION_UID_LABEL = "benchfarm.io/bisection-uid"
BUILD_LABEL = "benchfarm.io/bisection-build"        # the build a run measures: 0..n-1
BATCH_LABEL = "benchfarm.io/bisection-batch"        # 1, 2, ...: the runs of one build's step
MAX_LAB_FAULTS = 3       # a step's runs that the lab failed (not the build) before it gives up

REVISION = "{rev}"      # in a template's URLs: the revision of the build
Revision = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9._-]+$")]
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
    good: SoftwareSet | None = Field(None, description=(
        "The last good build: every step's reference (A). Or goodRevision with a template."))
    builds: list[SoftwareSet] = Field(default_factory=list, max_length=256, description=(
        "The builds after the good one, in order; the last is the bad one. Each is named (its "
        "revision in the record `benchfarm bisect log` prints). Or revisions with a template."))
    template: SoftwareSet | None = Field(None, description=(
        "Every build's software, its URLs holding {rev} where the revision goes (e.g. "
        "https://ci.example/builds/{rev}/Image with sha256Url .../builds/{rev}/SHA256SUMS): "
        "the builds are goodRevision's and the revisions'."))
    goodRevision: Revision | None = Field(None, description="With template: the good build's.")
    revisions: list[Revision] = Field(default_factory=list, max_length=256, json_schema_extra={
        "x-kubernetes-list-type": "set"}, description=(
            "With template: the revisions after the good one, in order; the last is the bad "
            "one's."))
    threshold: float = Field(0.05, ge=0.001, le=1.0, description=(
        "The smallest slowdown that counts, relative (0.05: 5 % worse than the good build)."))
    pairsPerRun: int = Field(3, ge=1, le=50, description=(
        "A/B pairs (iterations) a step's run measures; a step adds runs until its verdict is "
        "confident or it has maxPairs."))
    maxPairs: int = Field(12, ge=3, le=200, description="A step's bound: unclear past it.")
    priority: int = Field(100, ge=0, le=1000, description="Priority of the step runs.")
    timeoutSeconds: int = Field(3600, ge=10, le=7 * 86400, description="Per step run.")
    cancel: bool = Field(False, description="Cancel the step that runs; keep what was found.")

    @model_validator(mode="after")
    def _from_template(self) -> BenchmarkBisectionSpec:
        """A template's builds, as if listed: every reader sees `good` and `builds`."""
        if self.template is not None and self.goodRevision and self.revisions:
            self.good = at_revision(self.template, self.goodRevision)
            self.builds = [at_revision(self.template, r) for r in self.revisions]
        if self.good is None or not self.builds:
            raise ValueError("give good and builds, or template, goodRevision and revisions")
        return self

    @property
    def good_build(self) -> SoftwareSet:
        assert self.good is not None        # _from_template: never None once validated
        return self.good


def at_revision(template: SoftwareSet, revision: str) -> SoftwareSet:
    """The template's software with `revision` in its URLs, named by it."""
    body = template.model_dump(exclude_none=True)
    for part in ARTIFACT_PARTS:
        if part in body:
            body[part] = {k: v.replace(REVISION, revision) for k, v in body[part].items()}
    return SoftwareSet.model_validate({**body, "name": revision})


_URLS = " || ".join(f"(has(self.template.{p}) && (self.template.{p}.url.contains('{REVISION}')"
                    f" || has(self.template.{p}.sha256Url) && "
                    f"self.template.{p}.sha256Url.contains('{REVISION}')))"
                    for p in ARTIFACT_PARTS)

BISECTION_SPEC_RULES = [
    {"rule": "has(self.selector.deviceType) || has(self.selector.board)",
     "message": "selector needs deviceType or board"},
    {"rule": "has(self.good) && has(self.builds) && size(self.builds) > 0 && !has(self.template) "
             "&& !has(self.goodRevision) && !has(self.revisions) || !has(self.good) && "
             "!has(self.builds) && has(self.template) && has(self.goodRevision) && "
             "has(self.revisions) && size(self.revisions) > 0",
     "message": "give good and builds, or template, goodRevision and revisions"},
    {"rule": "!has(self.good) || size(self.good.name) > 0 && self.builds.all(b, size(b.name) > 0)",
     "message": "name the good build and every build (a revision or a build's label)"},
    {"rule": "!has(self.builds) || !has(self.good) || self.builds.all(b, b.name != self.good.name && "
             "self.builds.exists_one(c, c.name == b.name))",
     "message": "build names must be unique, and none the good build's"},
    {"rule": "!has(self.revisions) || !(self.goodRevision in self.revisions)",
     "message": "the revisions come after goodRevision: it is not one of them"},
    {"rule": f"!has(self.template) || {_URLS}",
     "message": "the template's URLs name no {rev}: every build would be the same files"},
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
