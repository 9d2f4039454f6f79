"""The end of a session that ran every step: results, reports and the serial log, from checkpoints.

This needs no board: it reads what the steps checkpointed in this attempt, so a session resumed
after it had released its board (or with no step left) comes straight here and never touches the
board again. It ends the run (`Succeeded`, `SuitesFailed`, or `OutsideEnvelope` when a step got
no valid measurement: `run_end`), with the regression verdict against a baseline or between the
A/B sides.

The documents are built from the tenant's figures in a budgeted child (`benchfarm.budgeted`,
BENCHFARM_REPORT_CPU_SECONDS and BENCHFARM_REPORT_MEMORY_MIB), as a step's parse is: a renderer
that runs away on them cannot hold the session's GIL, which goes on renewing its Lease, and past
the budget the run fails with ReportOverBudget, the run's fault.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from benchfarm import budgeted
from benchfarm.api.devicetype import DeviceType
from benchfarm.api.labpolicy import LabPolicySpec
from benchfarm.api.outcomes import Condition, Phase, Reason, RunFailure
from benchfarm.api.runs import ARTIFACT_PARTS, BenchmarkRunStatus
from benchfarm.core.conditions import now_iso
from benchfarm.errors import InfraError, RunError
from benchfarm.lab.session import Cancelled
from benchfarm.session.context import RunContext
from benchfarm.session.lifeline import Fenced
from benchfarm.session.parsing import PRELOAD
from benchfarm.session.steps import read_checkpoints
from benchfarm.store.artifacts import ArtifactStore

if TYPE_CHECKING:       # session.results loads numpy and scipy: on the first report, not before
    from benchfarm.session.results import Collected, Documents

log = logging.getLogger("benchfarm.session")


def complete(ctx: RunContext, dtype: DeviceType) -> None:
    from benchfarm.session import results as res
    got = res.Collected()
    for c in read_checkpoints(ctx):
        got.add(c)
    spec = ctx.spec
    baseline_doc = _baseline_doc(ctx, spec.baseline) if spec.baseline else None
    policy_body = ctx.kube.get_cluster("labpolicies", "default")
    policy = LabPolicySpec(**(policy_body or {}).get("spec") or {}) if policy_body else None
    run_info = {"namespace": ctx.namespace, "name": ctx.name, "uid": ctx.uid,
                "board": ctx.place, "deviceType": dtype.name,
                "plan": spec.plan or "(inline)", "iterations": ctx.iterations(),
                "bootCycles": spec.bootCycles, "attempt": ctx.attempt,
                "warmupIterations": spec.warmupIterations, "resumes": ctx.resume,
                # the run's identity in the results index (benchfarm.history)
                "labels": ctx.labels, "softwareSets": software_sets(ctx),
                "finishedAt": now_iso()}
    sides = ctx.sides()
    labels = {key: label for key, label, _ in sides} if len(sides) == 2 else None
    docs = build_documents(ctx, run_info, dtype, got, labels, baseline_doc, policy)
    if labels is not None:
        got.provenance = {labels[k]: c.provenance for k, c in got.sides.items()}
        got.boots = [b for c in got.sides.values() for b in c.boots]
        got.records = [r for c in got.sides.values() for r in c.records]
    urls = [serial_log(ctx)]
    for name, (data, ctype) in docs.files.items():
        urls.append(ctx.spool.put(f"{ctx.prefix}/{name}", data, ctype))
    urls.append(ctx.spool.store.url(f"{ctx.prefix}/raw/"))
    if not ctx.spool.drain(ctx.deadline):
        raise RunError(f"the run's timeout ran out while uploading artifacts: "
                       f"{ctx.spool.last_error}", reason=RunFailure.outage_outlasted_run)
    status: dict[str, Any] = {"results": docs.results, "artifacts": urls,
                              "provenance": got.provenance,
                              "progress": f"done ({len(got.records)} suite runs)"}
    if docs.regression is not None:
        ctx.status.condition(Condition.regressed, *docs.regression)
    ctx.status.finish(*run_end(docs, len(got.boots), len(got.records), ctx.place), status)
    if docs.regression is not None and docs.regression[0] == "True":
        ctx.status.event("Warning", Condition.regressed, docs.regression[2])


def run_end(docs: Documents, boots: int, records: int, place: str) -> tuple[Phase, str, str]:
    """How the run ends (phase, reason, message): SuitesFailed when a suite failed; else
    OutsideEnvelope when a step got no valid measurement (every attempt outside its envelope:
    neither the build nor the board is charged, the report says what was measured and why it
    does not count); else Succeeded."""
    if docs.failed:
        return (Phase.failed, Reason.suites_failed,
                f"{len(docs.failed)} suite(s) failed: {', '.join(docs.failed)}; see report.md")
    if docs.unmeasured:
        steps = list(docs.unmeasured.items())
        said = "; ".join(f"{step}: {'; '.join(why[:2]) or 'outside its envelope'}"[:400]
                         for step, why in steps[:3])
        more = f" (and {len(steps) - 3} more step(s))" if len(steps) > 3 else ""
        return (Phase.failed, RunFailure.outside_envelope,
                f"no valid measurement of {len(steps)} step(s), every attempt outside the "
                f"envelope: {said}{more}; neither the build nor the board is charged: see "
                f"report.md")
    return (Phase.succeeded, Reason.completed,
            f"{boots} boot(s) timed and {records} suite runs on {place}")


def build_documents(ctx: RunContext, run_info: dict[str, Any], dtype: DeviceType,
                    got: Collected, labels: dict[str, str] | None,
                    baseline_doc: dict[str, Any] | None, policy: LabPolicySpec | None
                    ) -> Documents:
    """`results.documents` in a child within the session's report budget. Raises
    RunError(ReportOverBudget) past it, Fenced or Cancelled when the session stopped meanwhile
    (the child killed)."""
    from benchfarm.session import results as res
    settings = ctx.config.settings
    lifeline = ctx.lifeline
    try:
        return budgeted.call(
            res.documents, run_info, dtype, ctx.suites, got, labels, ctx.spec.baseline,
            baseline_doc, policy, ctx.spec.repeat, name="report", preload=PRELOAD,
            budget=budgeted.Budget(settings.report_cpu_seconds, settings.report_memory_mib),
            stopped=lambda: lifeline.fenced.is_set() or lifeline.cancel.is_set())
    except budgeted.OverBudget as exc:
        raise RunError(f"building the run's results and reports from its figures {exc.what}: "
                       f"the run's figures are to blame (BENCHFARM_REPORT_CPU_SECONDS, "
                       f"BENCHFARM_REPORT_MEMORY_MIB)",
                       reason=RunFailure.report_over_budget) from None
    except budgeted.Abandoned:
        if lifeline.fenced.is_set():
            raise Fenced("the session was fenced while it built the run's results") from None
        raise Cancelled("the session stopped while it built the run's results") from None
    except budgeted.Failed as exc:     # a bug of benchfarm's: the runner says InternalError
        raise RuntimeError(f"building the results failed: {exc.detail}") from None


def software_sets(ctx: RunContext) -> dict[str, dict[str, Any]]:
    """Each side's software set by its label: its name and its artifacts' digests."""
    out: dict[str, dict[str, Any]] = {}
    for _key, label, software in ctx.sides():
        if software is None:
            continue
        digests = {part: a.sha256 or a.sha256Url for part in ARTIFACT_PARTS
                   if (a := getattr(software, part)) is not None}
        if software.bootArgs:
            digests["bootArgs"] = software.bootArgs
        out[label] = {"name": label, "digests": digests}
    return out


def serial_log(ctx: RunContext) -> str:
    """serial.log: every console byte of this attempt, across resumes, in order."""
    parts = sorted(k for k in ctx.lifeline.wait_out("list serial logs", lambda: ctx.spool.keys(
        f"{ctx.prefix}/serial/attempt-{ctx.attempt:03d}-")))
    return ctx.lifeline.wait_out("write serial.log", lambda: ctx.spool.concat(
        parts, f"{ctx.prefix}/serial.log", "text/plain"))


def _baseline_doc(ctx: RunContext, baseline: str) -> dict[str, Any] | None:
    base = ctx.kube.get_run(ctx.namespace, baseline)
    if base is None or BenchmarkRunStatus.of(base.get("status")).phase not in (Phase.succeeded,
                                                                                Phase.failed):
        return None
    prefix = ArtifactStore.run_prefix(ctx.namespace, baseline, base["metadata"]["uid"],
                                      base["spec"].get("artifactPrefix", ""))
    try:
        doc: dict[str, Any] = json.loads(ctx.lifeline.wait_out(
            "read the baseline", lambda: ctx.spool.store.get(f"{prefix}/metrics.json")))
        return doc
    except InfraError:
        return None
