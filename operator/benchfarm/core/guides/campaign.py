"""What a campaign needs next, from its spec and the runs it has made: pure, so every case of
columns, retries and cancelling is tested without a cluster (operator.campaigns does the I/O).

Each column gets one BenchmarkRun (`<campaign>-<column>-1`); a run that ends without results (not
Succeeded, nor SuitesFailed: a failed suite fails on any board, the rest of its figures count) is
followed by one more on another board of the same kind (`-2`, the failed board in its avoid
annotation, when the lab has another board for it); a column whose runs all failed is missing,
with the last run's reason. A cancelled
campaign makes no run and cancels those still going.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchfarm.api.base import GROUP, VERSION
from benchfarm.api.campaigns import (
    ATTEMPT_LABEL,
    AVOID_ANNOTATION,
    CAMPAIGN_LABEL,
    CAMPAIGN_UID_LABEL,
    COLUMN_LABEL,
    MAX_ATTEMPTS,
    RELEASE_LABEL,
    BenchmarkCampaignSpec,
    CampaignColumn,
    CampaignReason,
    ColumnPhase,
    ColumnStatus,
)
from benchfarm.api.outcomes import FINISHED, Condition, Phase, Reason
from benchfarm.api.runs import BenchmarkRunStatus


@dataclass
class Plan:
    columns: list[ColumnStatus]
    create: list[dict[str, Any]] = field(default_factory=list)    # BenchmarkRun bodies
    cancel: list[str] = field(default_factory=list)               # names of runs to cancel

    @property
    def finished(self) -> bool:
        return all(c.phase in (ColumnPhase.succeeded, ColumnPhase.missing) for c in self.columns)


def run_name(campaign: str, column: str, attempt: int) -> str:
    """`<campaign>-<column>-<attempt>`, within Kubernetes' 63 characters: a long one keeps its
    start and a digest of the whole, so two columns never share a name."""
    name = f"{campaign}-{column}-{attempt}".replace("_", "-").replace(".", "-")
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:52].rstrip('-')}-{digest}-{attempt}"


def _measured(run: Mapping[str, Any]) -> bool:
    """It has results: it Succeeded, or some suites failed on a healthy board (the rest of its
    figures are in; the report says which failed, a second board would fail them the same)."""
    return BenchmarkRunStatus.of(run.get("status")).phase == Phase.succeeded or \
        _why(run)[0] == Reason.suites_failed


def _why(run: Mapping[str, Any]) -> tuple[str, str]:
    status = BenchmarkRunStatus.of(run.get("status"))
    for c in status.conditions:
        if c.type == Condition.succeeded:
            return c.reason, c.message
    return status.phase or "", ""


def run_body(campaign: Mapping[str, Any], spec: BenchmarkCampaignSpec, column: CampaignColumn,
             attempt: int, avoid: Sequence[str] = ()) -> dict[str, Any]:
    meta = campaign["metadata"]
    run_spec: dict[str, Any] = {
        "selector": column.selector.model_dump(exclude_none=True, exclude_defaults=True),
        "plan": spec.plan, "bootCycles": spec.bootCycles, "priority": spec.priority,
        "timeoutSeconds": spec.timeoutSeconds, "warmupIterations": spec.warmupIterations}
    if spec.repeat is not None:
        run_spec["repeat"] = spec.repeat.model_dump(exclude_none=True)
    else:
        run_spec["iterations"] = spec.iterations
    if column.software is not None:
        run_spec["software"] = column.software.model_dump(exclude_none=True, exclude_defaults=True)
    body: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "BenchmarkRun",
        "metadata": {
            "name": run_name(meta["name"], column.name, attempt), "namespace": meta["namespace"],
            "labels": {CAMPAIGN_LABEL: meta["name"], CAMPAIGN_UID_LABEL: meta["uid"],
                       COLUMN_LABEL: column.name, ATTEMPT_LABEL: str(attempt),
                       RELEASE_LABEL: spec.release},
            "ownerReferences": [{"apiVersion": f"{GROUP}/{VERSION}", "kind": "BenchmarkCampaign",
                                 "name": meta["name"], "uid": meta["uid"], "controller": True}]},
        "spec": run_spec}
    if avoid:
        body["metadata"]["annotations"] = {AVOID_ANNOTATION: ",".join(avoid)}
    return body


def plan(campaign: Mapping[str, Any], spec: BenchmarkCampaignSpec,
         runs: Sequence[Mapping[str, Any]],
         elsewhere: Callable[[CampaignColumn, Sequence[str]], bool] = lambda c, b: True) -> Plan:
    """The columns as they stand, the runs to make and the runs to cancel. `elsewhere(column,
    boards)`: whether another board than these could take the column (else its retry may have
    the same board again rather than wait for one that does not exist)."""
    uid = campaign["metadata"]["uid"]
    by_column: dict[str, dict[int, Mapping[str, Any]]] = {}
    for r in runs:
        labels = r["metadata"].get("labels") or {}
        if labels.get(CAMPAIGN_UID_LABEL) != uid:
            continue       # a run of an older campaign of the same name
        try:
            attempt = int(labels.get(ATTEMPT_LABEL, ""))
        except ValueError:
            continue
        by_column.setdefault(labels.get(COLUMN_LABEL, ""), {})[attempt] = r
    out = Plan([])
    for column in spec.columns:
        attempts = by_column.get(column.name, {})
        last = max(attempts) if attempts else 0
        run = attempts.get(last)
        status = ColumnStatus(name=column.name, phase=ColumnPhase.waiting, attempts=last)
        out.columns.append(status)
        if run is None:
            if spec.cancel:
                status.phase, status.reason = ColumnPhase.missing, CampaignReason.cancelled
            else:
                out.create.append(run_body(campaign, spec, column, 1))
                status.attempts = 1
                status.run = run_name(campaign["metadata"]["name"], column.name, 1)
            continue
        status.run = run["metadata"]["name"]
        seen = BenchmarkRunStatus.of(run.get("status"))
        status.board, phase = seen.board or "", seen.phase
        if _measured(run):
            status.phase = ColumnPhase.succeeded
            if phase != Phase.succeeded:
                status.reason, status.message = _why(run)
            continue
        if phase not in FINISHED:
            status.phase = ColumnPhase.retrying if last > 1 else ColumnPhase.waiting
            if spec.cancel and not (run.get("spec") or {}).get("cancel"):
                out.cancel.append(run["metadata"]["name"])
            continue
        status.reason, status.message = _why(run)
        if last < MAX_ATTEMPTS and not spec.cancel and phase != Phase.cancelled:
            failed_on = sorted({b for r in attempts.values()
                                if (b := BenchmarkRunStatus.of(r.get("status")).board)})
            avoid = failed_on if failed_on and elsewhere(column, failed_on) else []
            out.create.append(run_body(campaign, spec, column, last + 1, avoid))
            status.phase, status.attempts = ColumnPhase.retrying, last + 1
            status.run = run_name(campaign["metadata"]["name"], column.name, last + 1)
            continue
        status.phase = ColumnPhase.missing
    return out
