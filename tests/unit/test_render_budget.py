"""What rendering a tenant's figures may cost: a budgeted call (`benchfarm.budgeted`) stops a
renderer at its CPU or memory budget, a run's reports past the session's budget fail the run
(ReportOverBudget) while its Lease thread runs on, and a dashboard page past its budget answers
503 while another page answers."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from types import SimpleNamespace

import pytest

from benchfarm import budgeted
from benchfarm.api.devicetype import BootSpec, DeviceType
from benchfarm.api.outcomes import Blame, RunFailure, blame
from benchfarm.api.runs import SuiteSpec
from benchfarm.core import steps as st
from benchfarm.core.statistics.results import SuiteRecord
from benchfarm.errors import RunError
from benchfarm.lab.session import Cancelled
from benchfarm.session import reporting, results as res
from benchfarm.session.lifeline import Fenced
from benchfarm.settings import Settings
from benchfarm.suites.base import Metric
from benchfarm.web.access import Person
from benchfarm.web.views import SeriesKey
from tests.unit.renewals import renewing

PRELOAD = ("benchfarm.session.parsing",)


def spin(n: int) -> int:
    """A renderer that never ends (an axis whose loop stands still)."""
    while True:
        n += 1


def hog(n: int) -> int:
    kept = []
    while True:
        kept.append(bytearray(64 * 1024 * 1024))


def broken(n: int) -> int:
    raise ZeroDivisionError("a renderer's bug")


def double(n: int) -> int:
    return 2 * n


def test_a_budgeted_call_gives_what_the_function_returns():
    assert budgeted.call(double, 21, budget=budgeted.Budget(5, 512), preload=PRELOAD) == 42


def test_a_runaway_renderer_is_stopped_at_its_cpu_budget_and_the_caller_runs_on():
    with renewing() as lease, pytest.raises(budgeted.OverBudget) as err:   # a session's Lease thread
        budgeted.call(spin, 0, budget=budgeted.Budget(1, 512), preload=PRELOAD)
    assert err.value.what == "took more than the 1 CPU seconds it may take"
    assert lease.took < 15
    assert len(lease.ticks) >= lease.took / 0.1 * 0.5      # the GIL was free: the thread ran on


def test_a_renderer_over_its_memory_budget_or_its_wall_bound_is_stopped():
    with pytest.raises(budgeted.OverBudget, match="more than the 512 MiB"):
        budgeted.call(hog, 0, budget=budgeted.Budget(30, 512), preload=PRELOAD)
    t = time.monotonic()
    with pytest.raises(budgeted.OverBudget, match="ran for more than 1 s"):
        budgeted.call(time.sleep, 60, budget=budgeted.Budget(30, 512, wall_seconds=1),
                      preload=PRELOAD)
    assert time.monotonic() - t < 5


def test_a_renderers_bug_and_a_stop_are_told_apart_from_the_budget():
    with pytest.raises(budgeted.Failed, match="ZeroDivisionError: a renderer's bug"):
        budgeted.call(broken, 0, budget=budgeted.Budget(5, 512), preload=PRELOAD)
    stop = time.monotonic() + 0.5
    with pytest.raises(budgeted.Abandoned):
        budgeted.call(spin, 0, budget=budgeted.Budget(60, 512), preload=PRELOAD,
                      stopped=lambda: time.monotonic() > stop)


# -- a run's reports ------------------------------------------------------------------------------
DTYPE = DeviceType(name="t", labgrid="t.labgrid.yaml", boot=BootSpec())
SUITES = [SuiteSpec(name="s", suite="shell", command="true")]
RUN = {"namespace": "ns", "name": "r", "board": "b", "deviceType": "t"}


def collected(metrics: int, iterations: int = 1) -> res.Collected:
    got = res.Collected()
    for i in range(1, iterations + 1):
        record = SuiteRecord(step="s", suite="shell", iteration=i, warmup=False, exit_code=0,
                             seconds=1.0, metrics=[Metric(f"m{j}", float(j + i), "ms", False)
                                                   for j in range(metrics)])
        got.add({"kind": st.SUITE, "record": record.as_dict()})
    return got


def context(cpu: float, *, baseline: str | None = None, stopped: bool = False
            ) -> SimpleNamespace:
    """What `reporting.build_documents` reads of a session's RunContext."""
    lifeline = SimpleNamespace(fenced=threading.Event(), cancel=threading.Event())
    if stopped:
        lifeline.fenced.set()
    settings = Settings(BENCHFARM_REPORT_CPU_SECONDS=cpu, BENCHFARM_REPORT_MEMORY_MIB=2048)
    return SimpleNamespace(config=SimpleNamespace(settings=settings), lifeline=lifeline,
                           suites=SUITES, spec=SimpleNamespace(baseline=baseline, repeat=None))


def test_a_runs_reports_built_in_the_budgeted_child_are_the_ones_built_here():
    got = collected(20, 3)
    docs = reporting.build_documents(context(30), RUN, DTYPE, got, None, None, None)
    here = res.build(RUN, DTYPE, SUITES, got)
    assert docs.files == here.files and docs.results == here.results
    assert docs.files["report.md"][0].count(b"| m") >= 20


def test_figures_whose_reports_go_past_the_budget_fail_the_run_as_its_own_fault():
    # a run at the metric cap (10,000) compared with a baseline as big: seconds of CPU, past 1
    got = collected(10_000)
    base = res.build(RUN, DTYPE, SUITES, collected(10_000)).doc
    with renewing() as lease, pytest.raises(RunError) as err:   # a session's Lease thread
        reporting.build_documents(context(1, baseline="base"), RUN, DTYPE, got, None, base,
                                  None)
    assert err.value.reason == RunFailure.report_over_budget
    assert blame(err.value.reason) == Blame.run
    assert "took more than the 1 CPU seconds" in err.value.message
    assert "BENCHFARM_REPORT_CPU_SECONDS" in err.value.message
    assert len(lease.ticks) >= lease.took / 0.1 * 0.5


def test_a_fenced_session_abandons_its_reports():
    with pytest.raises(Fenced):
        reporting.build_documents(context(30, stopped=True), RUN, DTYPE, collected(10_000),
                                  None, None, None)
    ctx = context(30)
    ctx.lifeline.cancel.set()
    with pytest.raises(Cancelled):
        reporting.build_documents(ctx, RUN, DTYPE, collected(10_000), None, None, None)


# -- the dashboard ---------------------------------------------------------------------------------
BIG, SMALL = SeriesKey("team", "big (us)", "t", "p"), SeriesKey("team", "small (us)", "t", "p")


class Source:
    """A history of 400,000 runs in one series (seconds of CPU to draw), and one of three."""

    def series_keys(self, namespaces):
        return [BIG, SMALL]

    def history(self, namespace, metric, device_type, plan, with_points=True):
        n = 400_000 if metric == BIG.metric else 3
        return {"series": [{"run": f"team/r{i}", "time": "2026-12-01T00:00:00Z",
                            "software": "b1", "board": "x", "mean": float(i),
                            "samples": [float(i), i + 1.0]} for i in range(n)],
                "changePoints": []}


class Access:
    def cached(self, token):
        return True, Person("alice", frozenset({"team"}))


async def _pages() -> dict[str, tuple[int, float, str]]:
    from aiohttp.test_utils import TestClient, TestServer

    from benchfarm.web.server import Dashboard
    dashboard = Dashboard(None, None, Source(), Access(), "default",
                          render_budget=budgeted.Budget(1, 1024, wall_seconds=20))
    out = {}
    async with TestClient(TestServer(dashboard.app())) as client:
        headers = {"Authorization": "Bearer t"}

        async def get(name: str, key: SeriesKey) -> None:
            t = time.monotonic()
            resp = await client.get("/history", headers=headers, params={
                "namespace": key.namespace, "metric": key.metric, "deviceType": key.device_type,
                "plan": key.plan})
            out[name] = (resp.status, time.monotonic() - t, await resp.text())

        async def small_later() -> None:
            await asyncio.sleep(1.0)      # while the big page is being drawn
            await get("small", SMALL)

        await asyncio.gather(get("big", BIG), small_later())
    return out


def test_a_page_past_its_render_budget_answers_503_and_another_page_answers_meanwhile():
    pages = _pages_run()
    status, _, text = pages["big"]
    assert status == 503
    assert "took more than the 1 CPU seconds" in text and "BENCHFARM_WEB_RENDER_CPU_SECONDS" in text
    status, took, text = pages["small"]
    assert status == 200 and 'class="history"' in text and "team/r2" in text
    assert took < pages["big"][1]          # it did not wait for the big one


def _pages_run() -> dict[str, tuple[int, float, str]]:
    return asyncio.run(_pages())


# -- the operator's renderings ---------------------------------------------------------------------
def memory_latency(cores: int, metrics: int = 10_000) -> dict:
    """A run at the metric cap whose figures shape into one table as wide as they are many (a
    column per "core": the name's last part is the tenant's)."""
    got = res.Collected()
    record = SuiteRecord(step="s", suite="console-timing", iteration=1, warmup=False,
                         exit_code=0, seconds=1.0, metrics=[
                             Metric(f"critical-memory-access-latency-t{j // cores}-c{j % cores}",
                                    float(j), "ns", False) for j in range(metrics)])
    got.add({"kind": st.SUITE, "record": record.as_dict()})
    return res.build(RUN, DTYPE, [SuiteSpec(name="s", suite="console-timing", command="true")],
                     got).doc


class CampaignKube:
    def __init__(self) -> None:
        self.patches, self.events = [], []

    def patch_custom(self, plural, ns, name, body, status=False):
        self.patches.append(body)

    def event(self, body, kind, reason, message):
        self.events.append((reason, message))


class CampaignStore:
    def __init__(self, doc: dict) -> None:
        self.doc, self.put_keys = doc, []

    def get_document(self, key):
        return self.doc

    def put(self, key, data, ctype):
        self.put_keys.append(key)
        return f"s3://lab/{key}"


def _publish(doc: dict, cpu: float) -> tuple[CampaignKube, CampaignStore]:
    from benchfarm.api.campaigns import BenchmarkCampaignSpec, ColumnPhase
    from benchfarm.core.statistics.regression import RegressionPolicy
    from benchfarm.operator.campaigns import Campaigns
    kube, store = CampaignKube(), CampaignStore(doc)
    campaigns = Campaigns(kube, store, RegressionPolicy, lambda: [],
                          budget=budgeted.Budget(cpu, 2048))
    try:
        columns = [SimpleNamespace(name=f"board-{i}", run=f"r{i}", phase=ColumnPhase.succeeded,
                                   reason="", message="") for i in range(4)]
        runs = [{"metadata": {"name": f"r{i}", "uid": f"u{i}"}, "spec": {}} for i in range(4)]
        body = {"metadata": {"namespace": "ns", "name": "c", "uid": "cu", "generation": 1}}
        spec = BenchmarkCampaignSpec(release="r1", plan="p", columns=[
            {"name": f"board-{i}", "selector": {"deviceType": "t"}} for i in range(4)])
        campaigns._publish(body, spec, SimpleNamespace(columns=columns), runs, {}, {})
    finally:
        campaigns.stop()
    return kube, store


def test_a_campaigns_guide_past_its_budget_fails_the_campaign_saying_why():
    from benchfarm.api.campaigns import CampaignReason
    kube, store = _publish(memory_latency(cores=10_000), cpu=1)
    (status,) = [p["status"] for p in kube.patches]
    condition = next(c for c in status["conditions"] if c["type"] == "Succeeded")
    assert (status["phase"], condition["reason"]) == ("Failed", CampaignReason.guide_over_budget)
    assert "took more than the 1 CPU seconds" in condition["message"]
    assert store.put_keys == []                  # no guide published half-made


def test_a_campaigns_guide_within_its_budget_is_published():
    from benchfarm.api.campaigns import CampaignReason
    kube, store = _publish(memory_latency(cores=4, metrics=40), cpu=30)
    (status,) = [p["status"] for p in kube.patches]
    condition = next(c for c in status["conditions"] if c["type"] == "Succeeded")
    assert condition["reason"] == CampaignReason.published
    assert sorted(k.rsplit("/", 1)[1] for k in store.put_keys) == ["guide.html", "guide.md",
                                                                     "guide.rst"]


def test_a_deliverys_kcidb_and_junit_documents_are_linear_in_a_runs_metrics():
    """What a KCIDB or JUnit delivery renders (operator.notifications.deliveries, report.ci) of a run at the metric
    cap: a small fraction of a second, growing with the metrics' count, not its square."""
    from benchfarm.report.ci import decided_outcome, junit, kcidb
    body = {"metadata": {"namespace": "ns", "name": "r", "uid": "u"},
            "spec": {"plan": "p", "selector": {"deviceType": "t"}},
            "status": {"phase": "Succeeded", "board": "b"}}

    def cost(doc: dict) -> float:
        """The least CPU time of three renderings (the collector left out: a full collection
        of what earlier tests left would be counted against whichever it fell into)."""
        times = []
        gc.collect()
        gc.disable()
        try:
            for _ in range(3):
                t = time.process_time()
                outcome = decided_outcome(body, doc)
                kcidb([outcome])
                junit([outcome])
                times.append(time.process_time() - t)
        finally:
            gc.enable()
        return min(times)

    small, full = memory_latency(cores=10_000, metrics=2_500), memory_latency(cores=10_000)
    assert len(full["records"][0]["metrics"]) == 10_000
    at_cap = cost(full)
    assert at_cap < 2.0
    assert at_cap < 10 * max(cost(small), 0.005)     # 4x the metrics: 4x the time, not 16x
