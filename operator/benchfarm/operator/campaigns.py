"""BenchmarkCampaigns: the operator makes each column's run, follows them, and publishes the guide.

A campaign's runs are ordinary BenchmarkRuns of its namespace (owned by it, labelled with the
release), so they wait in the same fair queue under the same limits as every other run, and
deleting the campaign deletes them (Kubernetes' garbage collector). What to do next is decided by
core.guides.campaign from the campaign and its runs; this module does the reading and writing, on one
worker thread fed by the watch events of campaigns and of their runs (never on kopf's loop, and
each campaign at most once in the queue however many events arrive: `operator.worker`).

When every column has ended, the guide (report.release: guide.rst, guide.md, guide.html) goes to
the store under the campaign's own prefix, `<namespace>/<campaign>/<uid>/`, and, when a previous
release is named, changes.md and changes.html with a `Regressed` condition naming the worst
regressions. An outage of the API server or the store is waited out; the campaign is tried again.
The guide and the changes are rendered from the tenant's figures in a budgeted child
(`benchfarm.budgeted`, BENCHFARM_GUIDE_CPU_SECONDS): a guide of wide tables took the operator
seconds of CPU, holding the GIL its scheduling needs; past the budget the campaign fails with
GuideOverBudget.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from benchfarm import budgeted
from benchfarm.api.campaigns import (
    ATTEMPT_LABEL,
    AVOID_ANNOTATION,
    CAMPAIGN_LABEL,
    CAMPAIGN_UID_LABEL,
    COLUMN_LABEL,
    BenchmarkCampaignSpec,
    BenchmarkCampaignStatus,
    CampaignColumn,
    CampaignReason,
    ColumnPhase,
)
from benchfarm.api.outcomes import FINISHED, Condition, Phase, Regression, Verdict
from benchfarm.core.conditions import as_written, get_condition, set_condition
from benchfarm.core.guides.campaign import Plan, plan
from benchfarm.core.scheduling.boardindex import BoardView, matches
from benchfarm.core.scheduling.queue import Selector
from benchfarm.core.statistics.regression import RegressionPolicy, worst_offenders
from benchfarm.kubeapi.client import Kube
from benchfarm.kubeapi.refusals import api_message
from benchfarm.operator.state import metrics
from benchfarm.operator.worker import Worker
from benchfarm.report.release import (
    Column,
    ColumnChanges,
    changes_html,
    changes_md,
    release_changes,
    release_guide,
    release_html,
    release_md,
    release_rst,
)
from benchfarm.store.artifacts import ArtifactStore, run_prefix

log = logging.getLogger(__name__)
PLURAL = "benchmarkcampaigns"
# what the renders' forkserver imports once: this module (its renderers) and the operator's main
PRELOAD = ("benchfarm.operator.campaigns", "benchfarm.cli")


def guide_documents(release: str, columns: list[Column]) -> dict[str, str]:
    """The guide as RST, Markdown and HTML: what the budgeted child renders."""
    guide = release_guide(release, columns)
    return {"rst": release_rst(guide), "md": release_md(guide), "html": release_html(guide)}


def _rendered(budget: budgeted.Budget, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` in a child within the guide's budget (raises budgeted.OverBudget)."""
    try:
        return budgeted.call(fn, *args, budget=budget, preload=PRELOAD,
                             name=f"campaign-{fn.__name__}")
    except budgeted.Failed as exc:      # a bug of benchfarm's: logged as one
        raise RuntimeError(f"{fn.__name__} failed: {exc.detail}") from None


def changes_documents(release: str, previous_name: str, previous: list[Column],
                      columns: list[Column], policy: RegressionPolicy
                      ) -> tuple[list[ColumnChanges], str, str]:
    """The changes from the previous release, and them as Markdown and HTML: the same child's."""
    changes = release_changes(previous, columns, policy)
    rule = policy.describe()
    return (changes, changes_md(release, previous_name, changes, rule),
            changes_html(release, previous_name, changes, rule))


class Campaigns:
    def __init__(self, kube: Kube, store: ArtifactStore, policy: Callable[[], RegressionPolicy],
                 boards: Callable[[], Sequence[BoardView]], *,
                 budget: budgeted.Budget) -> None:
        self.kube, self.store, self.policy, self.boards = kube, store, policy, boards
        self.budget = budget      # BENCHFARM_GUIDE_CPU_SECONDS, BENCHFARM_GUIDE_MEMORY_MIB
        self._worker = Worker("campaign", self.reconcile, log)

    # -- what the watch streams tell ----------------------------------------------------------
    def observe_campaign(self, event_type: str | None, body: dict[str, Any]) -> None:
        if event_type != "DELETED":
            self._mark(f"{body['metadata']['namespace']}/{body['metadata']['name']}")

    def observe_run(self, body: dict[str, Any]) -> None:
        campaign = (body["metadata"].get("labels") or {}).get(CAMPAIGN_LABEL)
        if campaign:
            self._mark(f"{body['metadata']['namespace']}/{campaign}")

    def _mark(self, key: str) -> None:
        self._worker.mark(key)

    def stop(self) -> None:
        self._worker.stop()

    # -- one campaign ----------------------------------------------------------------------------
    def reconcile(self, key: str) -> None:
        ns, name = key.split("/", 1)
        body = self.kube.get_custom(PLURAL, ns, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return
        status = dict(body.get("status") or {})
        generation = body["metadata"].get("generation", 1)
        seen = BenchmarkCampaignStatus.of(status)
        if seen.phase in FINISHED and seen.observedGeneration == generation:
            return        # published (or cancelled) and nothing asked since
        try:
            spec = BenchmarkCampaignSpec(**body.get("spec") or {})
        except ValidationError as exc:   # the schema admits only valid ones; an older one here
            self._finish(body, status, Phase.failed, "InvalidSpec", str(exc), {})
            return
        runs = self.kube.list_custom("benchmarkruns", ns,
                                     f"{CAMPAIGN_UID_LABEL}={body['metadata']['uid']}")
        p = plan(body, spec, runs, self._elsewhere)
        refused = self._create(body, p)
        for run in p.cancel:
            self.kube.patch_custom("benchmarkruns", ns, run, {"spec": {"cancel": True}})
        columns = [c.model_dump(exclude_defaults=True) for c in p.columns]
        done = sum(c.phase == ColumnPhase.succeeded for c in p.columns)
        missing = [c for c in p.columns if c.phase == ColumnPhase.missing]
        fields: dict[str, Any] = {
            "columns": columns, "done": f"{done}/{len(p.columns)}", "failed": len(missing),
            "running": sum(c.phase in (ColumnPhase.waiting, ColumnPhase.retrying)
                           for c in p.columns)}
        if refused:
            self._finish(body, {**status, **fields}, Phase.failed, "RunRefused", refused, fields)
            return
        if not p.finished:
            fields["phase"] = Phase.running if any(c.board for c in p.columns) else Phase.pending
            fields["conditions"] = set_condition(
                seen.conditions, Condition.succeeded, "Unknown", CampaignReason.running,
                f"{done} of {len(p.columns)} columns have results", generation)
            self.kube.patch_custom(PLURAL, ns, name, {"status": fields}, status=True)
            return
        if spec.cancel:
            self._finish(body, {**status, **fields}, Phase.cancelled, CampaignReason.cancelled,
                         f"cancelled with {done} of {len(p.columns)} columns measured", fields)
            return
        self._publish(body, spec, p, runs, {**status, **fields}, fields)

    def _elsewhere(self, column: CampaignColumn, avoid: Sequence[str]) -> bool:
        sel = column.selector
        selector = Selector.of(sel.deviceType, sel.labels, sel.board)
        return any(matches(selector, b) and b.name not in avoid for b in self.boards())

    def _create(self, body: dict[str, Any], p: Plan) -> str:
        """Make the runs the plan asks for; what the API refused (a tenant's input), if any."""
        ns = body["metadata"]["namespace"]
        for run in p.create:
            attempt = int(run["metadata"]["labels"][ATTEMPT_LABEL])
            column = run["metadata"]["labels"][COLUMN_LABEL]
            try:
                created = self.kube.create_custom("benchmarkruns", ns, run)
            except ApiException as exc:   # 4xx: the schema or a policy refused what it names
                message = api_message(exc)
                self.kube.event(body, "Warning", "RunRefused", f"column {column}: {message}")
                return f"column {column}: {message}"
            if created and attempt > 1:
                avoid = run["metadata"].get("annotations", {}).get(AVOID_ANNOTATION, "")
                self.kube.event(body, "Warning", "ColumnRetried",
                                f"column {column}: run {run['metadata']['name']} on another board"
                                f" than {avoid or 'the first'}")
        return ""

    def _publish(self, body: dict[str, Any], spec: BenchmarkCampaignSpec, p: Plan,
                 runs: list[dict[str, Any]], status: dict[str, Any],
                 fields: dict[str, Any]) -> None:
        meta = body["metadata"]
        ns, name = meta["namespace"], meta["name"]
        columns = self._columns(ns, p, {r["metadata"]["name"]: r for r in runs})
        if not any(c.doc for c in columns):
            self._finish(body, status, Phase.failed, CampaignReason.nothing_measured,
                         "no column has results: " + "; ".join(
                             f"{c.name}: {c.missing}" for c in columns), fields)
            return
        prefix = run_prefix(ns, name, meta["uid"])
        previous = self._previous(ns, name, spec)
        try:
            texts = _rendered(self.budget, guide_documents, spec.release, columns)
            changes = _rendered(self.budget, changes_documents, spec.release,
                                spec.previous or spec.previousRelease or "", previous, columns,
                                self.policy()) if isinstance(previous, list) else None
        except budgeted.OverBudget as exc:
            self._finish(body, status, Phase.failed, CampaignReason.guide_over_budget,
                         f"rendering the guide from its columns' figures {exc.what}: the runs' "
                         f"figures are to blame (BENCHFARM_GUIDE_CPU_SECONDS, "
                         f"BENCHFARM_GUIDE_MEMORY_MIB)", fields)
            return
        fields["guide"] = {
            fmt: self.store.put(f"{prefix}/guide.{fmt}", texts[fmt].encode(), ctype)
            for fmt, ctype in (("rst", "text/x-rst; charset=utf-8"),
                               ("md", "text/markdown; charset=utf-8"),
                               ("html", "text/html; charset=utf-8"))}
        conditions = as_written(BenchmarkCampaignStatus.of(status).conditions)
        if isinstance(previous, str):
            conditions = set_condition(conditions, Condition.regressed, "Unknown",
                                       CampaignReason.previous_not_found, previous, meta.get("generation"))
        elif changes is not None:
            conditions = self._changes(body, spec, changes, prefix, fields, conditions)
        missing = [c for c in columns if c.doc is None]
        fields["conditions"] = conditions
        if missing:
            for c in missing:
                self.kube.event(body, "Warning", "ColumnMissing", f"column {c.name}: {c.missing}")
            self._finish(body, {**status, "conditions": conditions}, Phase.failed,
                         CampaignReason.columns_missing,
                         f"guide published without {', '.join(c.name for c in missing)} ("
                         + "; ".join(f"{c.name}: {c.missing}" for c in missing) + ")", fields)
        else:
            self._finish(body, {**status, "conditions": conditions}, Phase.succeeded,
                         CampaignReason.published,
                         f"guide of {len(columns)} columns: {fields['guide']['html']}", fields)
        self.kube.event(body, "Normal", "GuidePublished", fields["guide"]["rst"])

    def _columns(self, ns: str, p: Plan, runs: dict[str, dict[str, Any]]) -> list[Column]:
        out = []
        for c in p.columns:
            run = runs.get(c.run)
            doc = self._metrics(ns, run) if c.phase == ColumnPhase.succeeded and run else None
            why = f"{c.reason}: {c.message}" if c.reason or c.message else "no results"
            out.append(Column(c.name, doc, "" if doc else why))
        return out

    def _metrics(self, ns: str, run: dict[str, Any]) -> dict[str, Any] | None:
        prefix = run_prefix(ns, run["metadata"]["name"], run["metadata"]["uid"],
                            (run.get("spec") or {}).get("artifactPrefix", ""))
        return self.store.get_document(f"{prefix}/metrics.json")

    def _previous(self, ns: str, name: str, spec: BenchmarkCampaignSpec
                  ) -> list[Column] | str | None:
        """The previous release's columns; a message when it cannot be found; None if unasked."""
        if spec.previous:
            prev = self.kube.get_custom(PLURAL, ns, spec.previous)
            if prev is None:
                return f"no BenchmarkCampaign {spec.previous} in {ns}"
        elif spec.previousRelease:
            same = [c for c in self.kube.list_custom(PLURAL, ns)
                    if (c.get("spec") or {}).get("release") == spec.previousRelease
                    and c["metadata"]["name"] != name and (c.get("status") or {}).get("guide")]
            if not same:
                return f"no published campaign of release {spec.previousRelease} in {ns}"
            prev = max(same, key=lambda c: c["metadata"]["creationTimestamp"])
        else:
            return None
        runs = {r["metadata"]["name"]: r for r in self.kube.list_custom(
            "benchmarkruns", ns, f"{CAMPAIGN_UID_LABEL}={prev['metadata']['uid']}")}
        out = []
        for c in (prev.get("status") or {}).get("columns") or []:
            run = runs.get(c.get("run", ""))
            doc = self._metrics(ns, run) if run and c.get("phase") == ColumnPhase.succeeded else None
            out.append(Column(c["name"], doc, "" if doc else c.get("reason") or "no results"))
        return out

    def _changes(self, body: dict[str, Any], spec: BenchmarkCampaignSpec,
                 rendered: tuple[list[ColumnChanges], str, str], prefix: str,
                 fields: dict[str, Any],
                 conditions: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        prev_name = spec.previous or spec.previousRelease or ""
        changes, text_md, text_html = rendered
        fields["previous"] = prev_name
        fields["changes"] = {
            "md": self.store.put(f"{prefix}/changes.md", text_md.encode(),
                                 "text/markdown; charset=utf-8"),
            "html": self.store.put(f"{prefix}/changes.html", text_html.encode(),
                                   "text/html; charset=utf-8")}
        worst = [(ch.column, c) for ch in changes for c in ch.comparisons
                 if c.verdict == Verdict.regressed]
        worst.sort(key=lambda wc: -wc[1].worse_by)
        generation = body["metadata"].get("generation")
        if worst:
            message = "; ".join(f"{col}: {worst_offenders([c], 1)}" for col, c in worst[:5])
            self.kube.event(body, "Warning", Condition.regressed, message)
            metrics.CAMPAIGN_REGRESSIONS.inc(len(worst))
            return set_condition(conditions, Condition.regressed, "True", Regression.regressed,
                                 f"{len(worst)} regressed against {prev_name}: {message}",
                                 generation)
        return set_condition(conditions, Condition.regressed, "False", Regression.none,
                             f"nothing regressed against {prev_name}", generation)

    def _finish(self, body: dict[str, Any], status: dict[str, Any], phase: Phase, reason: str,
                message: str, fields: dict[str, Any]) -> None:
        meta = body["metadata"]
        generation = meta.get("generation", 1)
        seen = BenchmarkCampaignStatus.of(status)
        fields = {**fields, "phase": phase, "observedGeneration": generation,
                  "conditions": set_condition(fields["conditions"] if "conditions" in fields
                                              else seen.conditions,
                                              Condition.succeeded,
                                              "True" if phase == Phase.succeeded
                                              else "False", reason, message, generation)}
        before = get_condition(seen.conditions, Condition.succeeded) or {}
        self.kube.patch_custom(PLURAL, meta["namespace"], meta["name"], {"status": fields},
                               status=True)
        if before.get("reason") != reason:
            metrics.CAMPAIGNS_FINISHED.labels(str(phase), reason).inc()
            if phase != Phase.succeeded:
                self.kube.event(body, "Warning", reason, message)

