"""Issue 24 on the real stack: finished runs in the results database (PostgreSQL of the lab),
`benchfarm history`, `benchfarm results reindex`, and a database outage that no run notices."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from benchfarm_devlab import VENV_BIN
from benchfarm_devlab.postgres import start_postgres, stop_postgres
from tests.stack.conftest import apply, wait_for
from tests.stack.runs import cond, finished, get, run_yaml, ts, unique

pytestmark = pytest.mark.stack

PLAN = """
apiVersion: benchfarm.io/v1alpha1
kind: TestPlan
metadata: {name: stacktest-history}
spec:
  suites:
    - {name: cyclictest, suite: cyclictest, command: cyclictest -m -t1 -p99 -i1000 -l200 -q, timeoutSeconds: 60}
"""
METRIC = "cyclictest/cyclictest-max"


@pytest.fixture(scope="module")
def custom(kube, operator):
    from kubernetes import client
    apply(PLAN)
    return client.CustomObjectsApi(kube)


def benchfarm(*args: str) -> str:
    return subprocess.run([str(VENV_BIN / "benchfarm"), *args], check=True, text=True,
                          capture_output=True, env=os.environ).stdout


def history() -> dict:
    return json.loads(benchfarm("history", METRIC, "--device-type", "qemu-x86", "--plan",
                                "stacktest-history", "--format", "json"))


def indexed(name: str) -> dict | None:
    return next((s for s in history()["series"] if s["run"] == f"default/{name}"), None)


def labelled_run(name: str) -> str:
    return run_yaml(name, plan="stacktest-history", bootCycles=1, iterations=3).replace(
        "namespace: default\n", "namespace: default\n  labels: {benchfarm.io/release: '11.01'}\n")


def test_a_finished_run_is_indexed_with_every_sample_and_history_shows_it(custom):
    name = unique("hist")
    apply(labelled_run(name))
    st = finished(custom, name)
    assert cond(st)["status"] == "True", st
    point = wait_for(f"{name} in the history", lambda: indexed(name), timeout=30)
    assert len(point["samples"]) == 3 and min(point["samples"]) <= point["mean"] <= max(
        point["samples"])
    assert point["board"] == st["board"]
    assert point["kernelRelease"] == st["provenance"]["kernelRelease"]
    assert point["uid"] == get(custom, name)["metadata"]["uid"]
    from sqlalchemy import select

    from benchfarm.history import Database
    from benchfarm.history.schema import results
    with Database.from_env().engine.connect() as conn:
        row = conn.execute(select(results).where(results.c.run_uid == point["uid"],
                                                 results.c.metric == METRIC)).one()._mapping
    assert row["labels"] == {"benchfarm.io/release": "11.01"}
    assert row["higher_is_better"] is False and row["unit"] == "us"
    assert row["plan_digest"] == st["provenance"]["planDigest"]
    table = benchfarm("history", METRIC, "--device-type", "qemu-x86", "--plan",
                      "stacktest-history")
    assert f"default/{name}" in table


def test_reindex_after_dropping_the_database_gives_the_same_history(custom):
    before = history()
    assert before["series"], "the test above left runs to index"
    from benchfarm.history import Database
    Database.from_env().drop()
    out = benchfarm("results", "reindex")
    assert out.startswith("indexed ")
    assert history() == before


def test_a_database_outage_neither_fails_nor_delays_runs_and_they_are_indexed_after(custom):
    names = [unique("hist-outage") for _ in range(2)]
    stop_postgres()
    down_since = time.monotonic()
    try:
        for name in names:
            apply(labelled_run(name))
        for name in names:
            st = finished(custom, name)
            assert cond(st)["status"] == "True", st
            # a run's own time (board acquired to done) as without the database: seconds
            started, done = ts(st["startTime"]), ts(cond(st)["lastTransitionTime"])
            assert done - started < 60, st
        time.sleep(max(0.0, 20 - (time.monotonic() - down_since)))     # down 20 s at least
    finally:
        start_postgres()
    for name in names:
        wait_for(f"{name} in the history after the outage", lambda n=name: indexed(n),
                 timeout=60, every=2)
