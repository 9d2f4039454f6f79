"""kopf handlers: a few lines each; they hand the object to the Runtime and map our errors.

Run with `benchfarm operator` (kopf run on this module, all namespaces, liveness endpoint). What
the handlers share lives in kopf's `memo` (`Parts`): the settings and the leader Lease, given by
`operator.main`; the runtime, the campaigns and the bisections, built by `startup` before kopf watches anything.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from benchfarm import budgeted
from benchfarm.api.base import GROUP, VERSION
from benchfarm.core.scheduling import queue as q
from benchfarm.core.statistics.regression import regression_policy
from benchfarm.errors import InfraError, RunError
from benchfarm.kubeapi.leases import LeaseHolder
from benchfarm.operator.bisections import Bisections
from benchfarm.operator.campaigns import Campaigns
from benchfarm.operator.runs import admission
from benchfarm.operator.runtime import Runtime
from benchfarm.settings import Settings

LIST_PAGE = 100      # objects per page of kopf's first listings (settings.watching.chunk_size)


class Parts(kopf.Memo):
    """The operator's parts, in kopf's memo (each handler gets it)."""

    settings: Settings
    lease: LeaseHolder | None       # the leader Lease (operator.main), given up at cleanup
    runtime: Runtime | None
    campaigns: Campaigns | None
    bisections: Bisections | None


def _runtime(memo: Any) -> Runtime | None:
    rt: Runtime | None = getattr(memo, "runtime", None)
    return rt


def _campaigns(memo: Any) -> Campaigns | None:
    campaigns: Campaigns | None = getattr(memo, "campaigns", None)
    return campaigns


def _bisections(memo: Any) -> Bisections | None:
    bisections: Bisections | None = getattr(memo, "bisections", None)
    return bisections


def runtime(memo: Any) -> Runtime:
    rt = _runtime(memo)
    if rt is None:
        raise kopf.TemporaryError("operator is still starting", delay=2)
    return rt


def _key(body: Any) -> str:
    return f"{body['metadata']['namespace']}/{body['metadata']['name']}"


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, logger: kopf.Logger, memo: kopf.Memo,
                  **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="benchfarm.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="benchfarm.io", key="last-handled-configuration")
    # kopf would post its own warnings (a handler's exception, its text: a service's address,
    # a host path) as events in the tenant's namespace; benchfarm posts its events itself,
    # through core.policy.redact (kubeapi.client), and kopf's warnings stay in the operator's log
    settings.posting.enabled = False
    # a line per handled event is noise at thousands of runs; failures still log as warnings
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    # kopf's first listing of each resource, in pages: a page's JSON is decoded in one C call
    # that holds the GIL, and the scheduler's rounds have begun by then (a listing of 10,000
    # runs decoded whole holds it for as long as a round may take)
    settings.watching.chunk_size = LIST_PAGE
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.error_backoffs = [1, 2, 5, 10, 20]
    # benchfarm's own settings, read by operator.main before leading (kopf run directly: here)
    rt = Runtime.from_settings(memo.get("settings") or Settings.from_env())
    while True:  # the lab's services may still be starting: wait them out
        try:
            await rt.start()
            break
        except InfraError as exc:
            logger.warning("waiting for the lab: %s", exc)
            await asyncio.sleep(3)
    memo.campaigns = Campaigns(rt.kube, rt.store, lambda: regression_policy(rt.policy),
                               rt.inventory.views,
                               budget=budgeted.Budget(rt.settings.guide_cpu_seconds,
                                                      rt.settings.guide_memory_mib))
    memo.bisections = Bisections(rt.kube, rt.store)
    memo.runtime = rt
    logger.info("benchfarm operator ready: %d device types", len(rt.device_types))


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    campaigns, rt = _campaigns(memo), _runtime(memo)
    if campaigns is not None:
        await asyncio.to_thread(campaigns.stop)
    if (bisections := _bisections(memo)) is not None:
        await asyncio.to_thread(bisections.stop)
    if rt is not None:
        await rt.stop()
    lease: LeaseHolder | None = getattr(memo, "lease", None)
    if lease is not None:    # nothing schedules any more: hand over now, not when kopf is done
        await asyncio.to_thread(lease.release)


@kopf.on.probe(id="scheduler")
def scheduler_alive(memo: kopf.Memo, **_: Any) -> bool:
    rt = _runtime(memo)
    return rt is not None and rt.owner.alive()


@kopf.on.event(GROUP, VERSION, "benchmarkruns")
def run_seen(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    campaigns, rt = _campaigns(memo), _runtime(memo)
    if rt is not None:
        rt.owner.post(rt.observe_run, event.get("type"), dict(body))
    if campaigns is not None:
        campaigns.observe_run(dict(body))
    if (bisections := _bisections(memo)) is not None:
        bisections.observe_run(dict(body))


@kopf.on.event(GROUP, VERSION, "benchmarkcampaigns")
def campaign_seen(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    campaigns, rt = _campaigns(memo), _runtime(memo)
    if campaigns is not None:
        campaigns.observe_campaign(event.get("type"), dict(body))
    if rt is not None and rt.notifier is not None:
        rt.notifier.campaign_seen(dict(body))


@kopf.on.event(GROUP, VERSION, "benchmarkbisections")
def bisection_seen(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    if (bisections := _bisections(memo)) is not None:
        bisections.observe_bisection(event.get("type"), dict(body))
    rt = _runtime(memo)
    if rt is not None and rt.notifier is not None:
        rt.notifier.bisection_seen(dict(body))


@kopf.on.event(GROUP, VERSION, "notifications")
def notification_seen(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    rt = _runtime(memo)
    if rt is not None and rt.notifier is not None:
        rt.notifier.observe(event.get("type"), dict(body))


@kopf.on.create(GROUP, VERSION, "benchmarkruns")
async def run_created(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    rt = runtime(memo)
    rt.owner.post(rt.observe_run, "ADDED", dict(body))
    try:
        await asyncio.to_thread(admission.admit, rt, dict(body))
    except InfraError as exc:
        raise kopf.TemporaryError(str(exc), delay=5) from exc
    except RunError as exc:
        raise kopf.PermanentError(str(exc)) from exc


@kopf.on.field(GROUP, VERSION, "benchmarkruns", field="spec.cancel")
async def run_cancel_changed(new: Any, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    if new:
        await asyncio.to_thread(runtime(memo).writes.cancel, _key(body))


@kopf.on.delete(GROUP, VERSION, "benchmarkruns")
async def run_deleted(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await asyncio.to_thread(runtime(memo).writes.cancel, _key(body), deleting=True)


@kopf.on.event(GROUP, VERSION, "boards")
def board_seen(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    rt = _runtime(memo)
    if rt is not None:
        rt.owner.post(rt.observe_board, dict(body))


@kopf.on.event(GROUP, VERSION, "labpolicies")
def policy_seen(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    rt = _runtime(memo)
    if rt is not None:
        rt.owner.post(rt.observe_policy, dict(body), deleted=event.get("type") == "DELETED")


@kopf.on.event("", "v1", "namespaces")
def namespace_seen(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A namespace being deleted loses its store credential at once (not at the next check)."""
    rt = _runtime(memo)
    if rt is not None and rt.store_accounts is not None and (
            event.get("type") == "DELETED" or body["metadata"].get("deletionTimestamp")):
        rt.store_accounts.gone(body["metadata"]["name"])


@kopf.on.event(GROUP, VERSION, "boardleases")
def lease_seen(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    rt = _runtime(memo)
    if rt is not None:
        rt.owner.post(rt.leases.observe, event.get("type"), dict(body))


@kopf.on.create(GROUP, VERSION, "boardleases")
async def lease_created(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    rt = runtime(memo)
    rt.owner.post(rt.leases.observe, "ADDED", dict(body))
    try:
        await asyncio.to_thread(rt.leases.admit, dict(body))
    except InfraError as exc:
        raise kopf.TemporaryError(str(exc), delay=5) from exc


@kopf.on.delete(GROUP, VERSION, "boardleases")
async def lease_deleted(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """The finalizer: a deleted lease's board is powered off and released before it goes."""
    rt = runtime(memo)
    key = q.lease_key(body["metadata"]["namespace"], body["metadata"]["name"])
    for _attempt in range(150):
        if await asyncio.to_thread(rt.leases.deleting, key):
            return
        await asyncio.sleep(0.2)
    raise kopf.TemporaryError("its board is still being powered off", delay=2)
