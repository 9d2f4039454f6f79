"""The results database and what results were measured under (issue 56): only counted
iterations are samples, each run's steps get a conditions row, and a change point whose runs
before and after were measured otherwise says so beside the build. Pure: the query reads a
stand-in for the database."""

from __future__ import annotations

import datetime as dt
from typing import Any

from benchfarm.api.conditions import CpuPolicy, Snapshot, StepConditions, StepPower, ThermalZone
from benchfarm.core.policy.runkey import RunKey
from benchfarm.core.statistics.results import SuiteRecord, metrics_document
from benchfarm.history.index import conditions_rows, rows
from benchfarm.history.query import history
from benchfarm.suites.base import Metric

WHERE = RunKey("team-a", "nightly-1", "u-1")
RUN = {"namespace": "team-a", "name": "nightly-1", "uid": "u-1", "board": "vb-a53-0",
       "deviceType": "qemu-arm64-a53", "plan": "nightly", "finishedAt": "2026-11-25T20:00:00Z"}


def conditions(mhz: int, temp: float, valid: bool = True, simulated: bool = True) -> dict:
    def snap(t: float) -> Snapshot:
        return Snapshot(t=t, cpufreq={"policy0": CpuPolicy(curKHz=mhz * 1000,
                                                           governor="performance")},
                        thermal={"thermal_zone0": ThermalZone(type="cpu", tempC=temp)})
    return StepConditions(before=snap(0), during=[snap(1)], after=snap(2),
                          power=StepPower(seconds=2, energyJ=3, averageW=1.5), valid=valid,
                          invalid=[] if valid else ["throttled: frequency 300 MHz"],
                          simulated=simulated).model_dump(mode="json")


def record(i: int, value: float, cond: dict | None, warmup: bool = False) -> SuiteRecord:
    return SuiteRecord("cpu", "sysbench", i, warmup, 0, 2.0,
                       [Metric("sysbench-cpu-events", value, "events/s", True)],
                       conditions=cond)


def document() -> dict[str, Any]:
    recs = [record(1, 1.0, conditions(1000, 40), warmup=True),
            record(2, 100.0, conditions(1000, 45)),
            record(3, 7.0, conditions(300, 80, valid=False)),       # throttled: invalid
            record(4, 102.0, conditions(1000, 47))]
    return {**metrics_document(RUN, [{"kernel-to-prompt": 9.5}], recs),
            "provenance": {"kernelRelease": "6.1"}}


def test_an_invalid_iterations_value_is_no_sample_even_where_the_documents_series_has_it():
    doc = document()
    (row,) = [r for r in rows(doc, WHERE) if r["metric"] == "cpu/sysbench-cpu-events"]
    assert row["samples"] == [100.0, 102.0] and row["n"] == 2
    # a document whose own series kept it (an older or another writer's): the records decide
    doc["series"][0]["values"] = [1.0, 100.0, 7.0, 102.0]
    (row,) = [r for r in rows(doc, WHERE) if r["metric"] == "cpu/sysbench-cpu-events"]
    assert row["samples"] == [100.0, 102.0]
    # a series none of whose iterations counts has no row
    for r in doc["records"]:
        if not r["warmup"]:
            r["conditions"]["valid"] = False
    assert [r["metric"] for r in rows(doc, WHERE)] == ["boot/kernel-to-prompt"]


def test_each_steps_conditions_over_its_counted_iterations_is_a_row():
    (row,) = conditions_rows(document(), WHERE)
    assert row == {"run_uid": "u-1", "side": "", "step": "cpu", "namespace": "team-a",
                   "iterations": 2, "min_mhz": 1000.0, "median_mhz": 1000.0, "max_mhz": 1000.0,
                   "governors": ["performance"], "min_temp_c": 45.0, "max_temp_c": 47.0,
                   "mean_power_w": 1.5, "simulated": True}
    ab = {"run": RUN, "sides": {"old": document(), "new": document()}}
    assert sorted(r["side"] for r in conditions_rows(ab, WHERE)) == ["new", "old"]
    assert conditions_rows({"run": RUN, "series": []}, WHERE) == []


class FakeDatabase:
    """The two reads `history` makes, over rows as the index writes them."""

    def __init__(self, results: list[dict[str, Any]], measured: list[dict[str, Any]]) -> None:
        self.results, self.measured = results, measured
        self.asked: list[str] = []

    def series_rows(self, namespace, metric, device_type, plan, since=None):
        return [r for r in self.results if r["metric"] == metric]

    def step_conditions(self, step, runs):
        self.asked.append(step)
        wanted = set(runs)
        return {(r["run_uid"], r["side"]): r for r in self.measured
                if r["step"] == step and (r["run_uid"], r["side"]) in wanted}


def series(mhz_after: int, temp_after: float = 45.0) -> FakeDatabase:
    """Twelve runs of a series, the last six half as fast and measured at `mhz_after`."""
    results, measured = [], []
    t0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    for i in range(12):
        late = i >= 6
        value = 500.0 if late else 1000.0
        doc = {**metrics_document({**RUN, "uid": f"u-{i}", "name": f"run-{i}",
                                   "finishedAt": (t0 + dt.timedelta(hours=i)).isoformat()}, [],
                                  [record(k, value + k % 2, conditions(
                                      mhz_after if late else 1000, temp_after if late else 45))
                                   for k in range(1, 4)])}
        where = RunKey("team-a", f"run-{i}", f"u-{i}")
        results += rows(doc, where)
        measured += conditions_rows(doc, where)
    return FakeDatabase(results, measured)


def test_a_change_point_whose_runs_were_measured_at_another_frequency_says_so():
    db = series(600, temp_after=75.0)
    doc = history(db, "team-a", "cpu/sysbench-cpu-events", "qemu-arm64-a53", "nightly")
    (cp,) = doc["changePoints"]
    assert cp["index"] == 6 and cp["direction"] == "regression"
    assert cp["conditions"] == ["frequency 1000 → 600 MHz", "temperature 45 → 75 °C"]
    assert cp["note"] == ("measured under other conditions: frequency 1000 → 600 MHz; "
                          "temperature 45 → 75 °C")
    assert db.asked == ["cpu"]


def test_a_change_point_measured_alike_names_the_build_alone():
    db = series(1000)
    (cp,) = history(db, "team-a", "cpu/sysbench-cpu-events", "qemu-arm64-a53",
                    "nightly")["changePoints"]
    assert cp["conditions"] == [] and cp["note"] == ""


def test_a_series_without_change_points_reads_no_conditions():
    db = series(1000)
    for r in db.results:
        r["samples"] = [1000.0, 1001.0, 999.0]
    assert history(db, "team-a", "cpu/sysbench-cpu-events", "qemu-arm64-a53",
                   "nightly")["changePoints"] == []
    assert db.asked == []


def test_the_dashboards_history_from_the_store_leaves_invalid_iterations_out_too():
    """Without the results database (web.history.StoreHistorySource), the points come from
    metrics.json: the records decide there too."""
    from benchfarm.web.history import StoreHistorySource
    from tests.unit.test_web_history_cache import FakeKube, FakeStore, _run
    doc = document()
    doc["series"][0]["values"] = [1.0, 100.0, 7.0, 102.0]      # as if the writer kept them all
    src = StoreHistorySource(FakeKube([_run(1)]), FakeStore(lambda key: doc))
    src._listed = (float("-inf"), [])
    points = {key.metric: p for key, p in src._points()}
    assert points["cpu/sysbench-cpu-events (events/s)"]["samples"] == [100.0, 102.0]


def test_the_change_point_event_says_the_runs_were_measured_under_other_conditions():
    """The operator's indexer words a new regression's ChangePoint event (on the run, and to the
    namespace's Notifications) with the point's note."""
    from benchfarm.operator.stores.indexer import Indexer
    (cp,) = history(series(600, temp_after=75.0), "team-a", "cpu/sysbench-cpu-events",
                    "qemu-arm64-a53", "nightly")["changePoints"]
    row = {"namespace": "team-a", "metric": "cpu/sysbench-cpu-events",
           "device_type": "qemu-arm64-a53", "plan": "nightly", "run_uid": cp["uid"],
           "direction": cp["direction"], "magnitude": cp["magnitude"], "pvalue": cp["pvalue"]}

    class Db:
        def record_points(self, rows):
            return list(rows)

    class Kube:
        def __init__(self):
            self.said = []

        def event(self, obj, type_, reason, message):
            self.said.append(message)
    told, kube = [], Kube()
    indexer = Indexer(Db(), None, kube)
    indexer.notify = told.append
    indexer._search = lambda series: [(row, cp)]
    indexer.due = {("team-a", row["metric"], row["device_type"], row["plan"]): None}
    indexer._change_points()
    (message,) = kube.said
    assert " regressed -49.97 % " in message and message.endswith(
        "; measured under other conditions: frequency 1000 → 600 MHz; temperature 45 → 75 °C")
    assert told[0].details["message"] == message
