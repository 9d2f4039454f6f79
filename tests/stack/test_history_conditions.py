"""Issue 56 (item 4) on the real stack: the results database knows what results were measured
under. Twelve runs' metrics.json, put in the lab's store as sessions write them (each record
with its api.conditions.StepConditions), are indexed into the lab's PostgreSQL as the operator's
indexer does (`index_run`): the first six measured at 1000 MHz, the last six at a 600 MHz cap
and hotter, and half as fast. `benchfarm history` finds the change point at the seventh run and
says it was measured under other conditions (frequency 1000 → 600 MHz, temperature), beside the
build; every run's step has its conditions row; and the value of each run's iteration measured
outside its envelope (throttled, invalid) is in no series."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import uuid

import pytest

from benchfarm.api.conditions import CpuPolicy, Snapshot, StepConditions, StepPower, ThermalZone
from benchfarm.core.statistics.results import SuiteRecord, metrics_document
from benchfarm.settings import Settings
from benchfarm.suites.base import Metric
from benchfarm_devlab import VENV_BIN

pytestmark = pytest.mark.stack

DEVICE_TYPE, STEP = "qemu-arm64-a53", "cpu"
METRIC = f"{STEP}/sysbench-cpu-events"
INVALID_VALUE = 7.0       # what a throttled iteration measured: never a sample


def conditions(mhz: int, temp: float, valid: bool = True) -> dict:
    def snap(t: float) -> Snapshot:
        return Snapshot(t=t, cpufreq={f"policy{i}": CpuPolicy(curKHz=mhz * 1000, maxKHz=1_000_000,
                                                              governor="performance")
                                      for i in range(2)},
                        thermal={"thermal_zone0": ThermalZone(type="cpu-thermal", tempC=temp)})
    return StepConditions(before=snap(0), during=[snap(1), snap(2)], after=snap(3),
                          power=StepPower(seconds=3, energyJ=4.5, averageW=1.5), valid=valid,
                          invalid=[] if valid else ["frequency 300 MHz below the envelope's "
                                                    "1000 MHz"], simulated=True
                          ).model_dump(mode="json")


def document(ns: str, name: str, uid: str, plan: str, when: dt.datetime, late: bool) -> dict:
    mhz, temp, value = (600, 78.0, 500.0) if late else (1000, 45.0, 1000.0)
    records = [SuiteRecord(STEP, "sysbench", i, False, 0, 3.0,
                           [Metric("sysbench-cpu-events", value + i % 2, "events/s", True)],
                           conditions=conditions(mhz, temp)) for i in (1, 2, 4)]
    records.insert(2, SuiteRecord(STEP, "sysbench", 3, False, 0, 3.0,
                                  [Metric("sysbench-cpu-events", INVALID_VALUE, "events/s", True)],
                                  conditions=conditions(300, 95.0, valid=False)))
    run = {"namespace": ns, "name": name, "uid": uid, "plan": plan, "deviceType": DEVICE_TYPE,
           "board": "vb-a53-0", "finishedAt": when.isoformat()}
    return metrics_document(run, [], records)


@pytest.fixture(scope="module")
def indexed(lab):
    from benchfarm.history import Database
    from benchfarm.history.index import index_run
    from benchfarm.store.artifacts import ArtifactStore, StoreConfig
    settings = Settings.from_env()
    db = Database.from_settings(settings)
    db.migrate()
    store = ArtifactStore(StoreConfig.from_settings(settings))
    plan = f"stacktest-conditions-{uuid.uuid4().hex[:8]}"
    t0 = dt.datetime.now(dt.UTC) - dt.timedelta(days=1)
    uids = []
    for i in range(12):
        name, uid = f"{plan}-{i}", str(uuid.uuid4())
        doc = document("default", name, uid, plan, t0 + dt.timedelta(minutes=i), late=i >= 6)
        key = f"default/{name}/{uid}/metrics.json"
        store.put(key, json.dumps(doc).encode(), "application/json")
        assert index_run(db, store, key) == 1      # one metric: the step's (no boot)
        uids.append(uid)
    yield db, plan, uids
    for uid in uids:
        db.forget_run(uid)
    db.close()


def cli_history(plan: str) -> dict:
    out = subprocess.run([str(VENV_BIN / "benchfarm"), "history", METRIC, "--device-type",
                          DEVICE_TYPE, "--plan", plan, "--format", "json"], check=True,
                         text=True, capture_output=True, env=os.environ).stdout
    return json.loads(out)


def test_the_change_point_says_the_runs_after_it_were_measured_under_other_conditions(indexed):
    db, plan, uids = indexed
    doc = cli_history(plan)
    assert len(doc["series"]) == 12
    (cp,) = doc["changePoints"]
    assert cp["uid"] == uids[6] and cp["direction"] == "regression"
    assert cp["conditions"] == ["frequency 1000 → 600 MHz", "temperature 45 → 78 °C"]
    assert cp["note"] == ("measured under other conditions: frequency 1000 → 600 MHz; "
                          "temperature 45 → 78 °C")
    text = subprocess.run([str(VENV_BIN / "benchfarm"), "history", METRIC, "--device-type",
                           DEVICE_TYPE, "--plan", plan], check=True, text=True,
                          capture_output=True, env=os.environ).stdout
    assert "; measured under other conditions: frequency 1000 → 600 MHz" in text


def test_an_invalid_iterations_value_is_in_no_series_and_each_run_has_its_conditions(indexed):
    db, plan, uids = indexed
    for point in cli_history(plan)["series"]:
        assert len(point["samples"]) == 3 and INVALID_VALUE not in point["samples"], point
    from sqlalchemy import select

    from benchfarm.history.schema import run_conditions
    with db.engine.connect() as conn:
        got = {r.run_uid: r for r in conn.execute(
            select(run_conditions).where(run_conditions.c.run_uid.in_(uids)))}
    assert set(got) == set(uids)
    first, last = got[uids[0]], got[uids[-1]]
    assert (first.step, first.iterations, first.median_mhz, first.max_temp_c) == (
        STEP, 3, 1000.0, 45.0)
    assert (last.min_mhz, last.median_mhz, last.max_temp_c, last.governors) == (
        600.0, 600.0, 78.0, ["performance"])
    assert first.mean_power_w == 1.5 and first.simulated is True
