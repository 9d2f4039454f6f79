"""What rendering a tenant's figures may cost: a budgeted call (`benchfarm.budgeted`) stops a
renderer at its CPU or memory budget, a run's reports past the session's budget fail the run
(ReportOverBudget) while its Lease thread runs on, and a dashboard page past its budget answers
503 while another page answers."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace

import pytest

from benchfarm import budgeted
from benchfarm.api.devicetype import BootSpec, DeviceType
from benchfarm.api.models import SuiteSpec
from benchfarm.api.outcomes import Blame, RunFailure, blame
from benchfarm.core import steps as st
from benchfarm.core.results import SuiteRecord
from benchfarm.errors import RunError
from benchfarm.lab.session import Cancelled
from benchfarm.session import reporting, results as res
from benchfarm.session.lifeline import Fenced
from benchfarm.settings import Settings
from benchfarm.suites.base import Metric
from benchfarm.web.access import Person
from benchfarm.web.views import SeriesKey

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
    ticks = []
    done = threading.Event()

    def renewals() -> None:        # what a session's Lease thread does meanwhile
        while not done.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.1)

    threading.Thread(target=renewals, daemon=True).start()
    t = time.monotonic()
    with pytest.raises(budgeted.OverBudget) as err:
        budgeted.call(spin, 0, budget=budgeted.Budget(1, 512), preload=PRELOAD)
    took = time.monotonic() - t
    done.set()
    assert err.value.what == "took more than the 1 CPU seconds it may take"
    assert took < 15
    assert len(ticks) >= took / 0.1 * 0.5      # the GIL was free: the other thread ran on


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
    ticks = []
    done = threading.Event()

    def renewals() -> None:
        while not done.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.1)

    threading.Thread(target=renewals, daemon=True).start()
    t = time.monotonic()
    with pytest.raises(RunError) as err:
        reporting.build_documents(context(1, baseline="base"), RUN, DTYPE, got, None, base,
                                  None)
    took = time.monotonic() - t
    done.set()
    assert err.value.reason == RunFailure.report_over_budget
    assert blame(err.value.reason) == Blame.run
    assert "took more than the 1 CPU seconds" in err.value.message
    assert "BENCHFARM_REPORT_CPU_SECONDS" in err.value.message
    assert len(ticks) >= took / 0.1 * 0.5


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
