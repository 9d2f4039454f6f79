"""BenchmarkCampaign: one plan on every board type of a release, published as its guide.

A campaign names a release, a plan and its columns (each a board selector, optionally a software
set); the operator makes one BenchmarkRun per column, owned by the campaign and queued like any
other run of its namespace, retries a failed column once on another board, and when every column
has ended publishes the release's guide (report.release) and its changes against the previous
release. What the operator and `kubectl` agree on about a campaign is defined here.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import ConfigDict, Field

from benchfarm.api.base import Condition, LabelValue, Model, Name, Status
from benchfarm.api.boards import BoardSelector
from benchfarm.api.runs import RepeatSpec, SoftwareSet

CAMPAIGN_LABEL = "benchfarm.io/campaign"       # on its runs: the campaign's name
CAMPAIGN_UID_LABEL = "benchfarm.io/campaign-uid"
COLUMN_LABEL = "benchfarm.io/column"
ATTEMPT_LABEL = "benchfarm.io/column-attempt"
RELEASE_LABEL = "benchfarm.io/release"
AVOID_ANNOTATION = "benchfarm.io/avoid-boards"   # a retried column's run: the board it failed on
MAX_ATTEMPTS = 2                                 # a failed column is retried once

# How the guide's header names a board: a digit, '_' or '-' in it (core.guides.cells reads a
# board column by that), lower case as a Kubernetes label value is.
ColumnName = Annotated[str, Field(min_length=2, max_length=40,
                                  pattern=r"^[a-z0-9][a-z0-9_.]*[-_0-9][-a-z0-9_.]*$")]


class CampaignColumn(Model):
    """One board column of the guide."""

    name: ColumnName = Field(description=(
        "The column's name in every table of the guide (e.g. am62xx_sk-fs, qemu-x86): lower "
        "case, with a digit, '_' or '-' as the guides' board names have."))
    selector: BoardSelector = Field(description="The boards that may run this column.")
    software: SoftwareSet | None = Field(
        None, description="Software under test for this column (default: the board's own).")


class BenchmarkCampaignSpec(Model):
    release: LabelValue = Field(description="The release's label, e.g. 11.01.16.13.",
                                pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
    plan: Name = Field(description="The TestPlan every column runs.")
    columns: list[CampaignColumn] = Field(min_length=1, max_length=16, description=(
        "The guide's columns: each a name, a board selector and optionally its own software set."))
    iterations: int = Field(3, ge=1, le=1000, description="Iterations of each column's run.")
    warmupIterations: int = Field(0, ge=0, le=100, description=(
        "Warm-up iterations of each column's run (left out of the statistics)."))
    bootCycles: int = Field(1, ge=1, le=100, description="Timed boots per run (the guides: 20).")
    repeat: RepeatSpec | None = None
    priority: int = Field(100, ge=0, le=1000, description=(
        "Priority of the column runs (within the namespace's ceiling)."))
    timeoutSeconds: int = Field(3600, ge=10, le=7 * 86400, description="Per column's run.")
    previous: Name | None = Field(
        None, description="The previous release's BenchmarkCampaign (this namespace) to compare with.")
    previousRelease: LabelValue | None = Field(
        None, description="Or its release label: the newest campaign of that release here.")
    cancel: bool = Field(False, description="Cancel every column's run; keep what was published.")


CAMPAIGN_SPEC_RULES = [
    {"rule": "self.columns.all(c, self.columns.exists_one(d, d.name == c.name))",
     "message": "column names must be unique"},
    {"rule": "!has(self.previous) || !has(self.previousRelease)",
     "message": "name the previous campaign or its release, not both"},
    {"rule": "self.columns.all(c, has(c.selector.deviceType) || has(c.selector.board))",
     "message": "each column's selector needs deviceType or board"},
    {"rule": "!has(self.repeat) || self.iterations == 3",
     "message": "with repeat, the number of iterations is decided by repeat; leave iterations unset"},
]


class ColumnPhase(StrEnum):
    """Where one column stands."""

    waiting = "Waiting"       # its run is queued or running
    succeeded = "Succeeded"   # its run has results
    retrying = "Retrying"     # its first run failed: a second one on another board
    missing = "Missing"       # both runs failed (or it was cancelled): missing in the guide


class CampaignReason(StrEnum):
    """The reasons of a campaign's Succeeded condition."""

    running = "ColumnsRunning"
    published = "Published"               # every column has results; the guide is published
    columns_missing = "ColumnsMissing"    # published, with the missing columns said
    nothing_measured = "NothingMeasured"  # no column has results: no guide
    cancelled = "Cancelled"
    previous_not_found = "PreviousNotFound"
    store_unavailable = "StoreUnavailable"
    #: rendering the guide (or the changes) from the columns' figures took more CPU time or
    #: memory than the lab allows (BENCHFARM_GUIDE_CPU_SECONDS): the runs' figures are to blame
    guide_over_budget = "GuideOverBudget"


class ColumnStatus(Model):
    model_config = ConfigDict(extra="allow")
    name: str
    phase: ColumnPhase
    run: str = ""
    board: str = ""
    attempts: int = 0
    reason: str = ""
    message: str = ""


class BenchmarkCampaignStatus(Status):
    """`status` of a BenchmarkCampaign (`operator.campaigns` writes it); read as `.of`."""

    phase: str | None = Field(None, description="Running, Succeeded, Failed or Cancelled.")
    conditions: list[Condition] = Field(default_factory=list)
    columns: list[ColumnStatus] = Field(default_factory=list)
    done: str | None = Field(None, description="Columns with results of all columns, e.g. 2/3.")
    running: int = Field(0, description="Column runs queued or running now.")
    failed: int = Field(0, description="Columns whose runs ended without results.")
    guide: dict[str, str] | None = None      # format -> s3:// URL of guide.rst, .md, .html
    changes: dict[str, str] | None = None    # changes.md, .html against the previous release
    previous: str | None = None
    observedGeneration: int | None = None

