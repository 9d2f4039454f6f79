"""A run as a CI pipeline reads it, for `benchfarm submit`, `upload` and `export`: the lab's API
with the pipeline's outage budget, the store as the run's namespace may use it, and a finished
run's outcome (`report.ci.Outcome`: its metrics and report from the store, its exit code decided).

The store is reached with the namespace's own credential, which the operator issues into its
Secret `benchfarm-store` and which reaches `<namespace>/` only (`store.accounts`), never with the
lab's; the kubeconfig (or in-cluster credentials) that reads the run reads that Secret too.
"""

from __future__ import annotations

import json
from typing import Any

from benchfarm.api.outcomes import Phase
from benchfarm.api.runs import BenchmarkRunStatus
from benchfarm.settings import Settings


def lab_api(settings: Settings) -> Any:
    """The Kubernetes API as a pipeline's command uses it (BENCHFARM_SUBMIT_OUTAGE_BUDGET)."""
    from benchfarm.kubeapi.client import Kube
    return Kube(settings, outage_budget=settings.submit_outage_budget)


def namespace_store(namespace: str, settings: Settings) -> Any:
    """The store as `namespace` may use it: with its own credential, read with the kubeconfig."""
    from benchfarm.store.accounts import namespace_store as store_of
    return store_of(lab_api(settings).secret_data, namespace)


def results(body: dict[str, Any],
            settings: Settings) -> tuple[dict[str, Any] | None, str | None]:
    """metrics.json and report.md of a finished run from the store; None when it has none."""
    from benchfarm.store.artifacts import run_prefix
    meta, spec = body["metadata"], body.get("spec") or {}
    store = namespace_store(meta["namespace"], settings)
    prefix = run_prefix(meta["namespace"], meta["name"], meta["uid"],
                        spec.get("artifactPrefix", ""))
    if store.sha256(f"{prefix}/metrics.json") is None:
        return None, None
    doc = json.loads(store.get(f"{prefix}/metrics.json"))
    report = store.get(f"{prefix}/report.md").decode(errors="replace") \
        if store.sha256(f"{prefix}/report.md") is not None else None
    return doc, report


def outcome_of(body: dict[str, Any], settings: Settings, *,
               interrupted: bool = False) -> tuple[Any, str | None]:
    """The run's `report.ci.Outcome` (its exit code decided) and its report."""
    from benchfarm.errors import BenchfarmError
    from benchfarm.report.ci import decided_outcome
    doc, report, unread = None, None, ""
    if BenchmarkRunStatus.of(body.get("status")).phase in (Phase.succeeded, Phase.failed):
        try:
            doc, report = results(body, settings)
        except BenchfarmError as exc:   # the store: the verdict of a failed run stands
            unread = f" ({exc.reason}: {exc.message})"
    return decided_outcome(body, doc, unread=unread, interrupted=interrupted), report
