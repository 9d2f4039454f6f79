"""Issue 24 on the real stack: finished runs in the results database (PostgreSQL of the lab),
`benchfarm history`, `benchfarm results reindex`, and a database outage that no run notices but
the operator's metrics do (`benchfarm_reachable`, which the chart's alerting rules read with the
rest of the operator's metrics: the running operator serves every one of them)."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import subprocess
import time
import urllib.request

import pytest
import yaml

import benchfarm_devlab as devlab
from benchfarm.settings import Settings
from benchfarm_devlab import VENV_BIN
from benchfarm_devlab.postgres import start_postgres, stop_postgres
from tests.conftest import FULL
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


def scrape() -> str:
    url = f"http://127.0.0.1:{devlab.PORTS.operator_metrics}/metrics"
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def sample(name: str, **labels: str) -> float | None:
    from prometheus_client.parser import text_string_to_metric_families
    return next((s.value for f in text_string_to_metric_families(scrape()) for s in f.samples
                 if s.name == name and s.labels == labels), None)


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
    with Database.from_settings(Settings.from_env()).engine.connect() as conn:
        row = conn.execute(select(results).where(results.c.run_uid == point["uid"],
                                                 results.c.metric == METRIC)).one()._mapping
    assert row["labels"] == {"benchfarm.io/release": "11.01"}
    assert row["higher_is_better"] is False and row["unit"] == "us"
    assert row["plan_digest"] == st["provenance"]["planDigest"]
    # the dashboard's list of series (an index skip scan) is the counted one's keys
    db = Database.from_settings(Settings.from_env())
    keys = db.series_keys(None)
    assert ("default", METRIC, "qemu-x86", "stacktest-history") in keys
    assert sorted(keys) == sorted((s["namespace"], s["metric"], s["deviceType"], s["plan"])
                                  for s in db.known_series(None))
    assert db.series_keys(["default"]) == [k for k in sorted(keys) if k[0] == "default"]
    table = benchfarm("history", METRIC, "--device-type", "qemu-x86", "--plan",
                      "stacktest-history")
    assert f"default/{name}" in table


def test_reindex_after_dropping_the_database_gives_the_same_history(custom):
    before = history()
    assert before["series"], "the test above left runs to index"
    from benchfarm.history import Database
    Database.from_settings(Settings.from_env()).drop()
    out = benchfarm("results", "reindex")
    assert out.startswith("indexed ")
    assert history() == before


def test_the_operator_serves_every_metric_the_alerting_rules_read(custom):
    """helm/benchfarm/files/alerts.yaml reads these from the lab's running operator: each is
    served (and passes `promtool check metrics`); it leads, and its probes
    reached the store and the database."""
    from prometheus_client.parser import text_string_to_metric_families
    rules = yaml.safe_load((devlab.REPO / "helm" / "benchfarm" / "files" / "alerts.yaml")
                           .read_text())
    read = {n for g in rules["groups"] for r in g["rules"]
            for n in re.findall(r"\bbenchfarm_[a-z0-9_]+", r["expr"])}
    text = wait_for("the boards counted", lambda: (t := scrape()) and
                    'benchfarm_boards{state="Quarantined"}' in t and t, timeout=20)
    served = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    assert len(read) >= 5 and read <= served, read - served
    assert sample("benchfarm_leader") == 1.0
    assert sample("benchfarm_reachable", party="store") == 1.0
    assert sample("benchfarm_reachable", party="database") == 1.0
    assert sample("benchfarm_infra_failures_total", party="store") is not None   # from 0
    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed (make promtool-deps)"
    theirs = "".join(line + "\n" for line in text.splitlines()
                     if re.split(r"[{ ]", line.removeprefix("# HELP ").removeprefix("# TYPE "),
                                 maxsplit=1)[0] in read)
    res = subprocess.run([promtool, "check", "metrics"], input=theirs, text=True,
                         capture_output=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_database_outage_neither_fails_nor_delays_runs_and_they_are_indexed_after(custom):
    """...and the operator's probe says it is down (BenchfarmDatabaseUnreachable) until it is
    back."""
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
        wait_for("the operator's probe to find the database down", lambda: sample(
            "benchfarm_reachable", party="database") == 0.0, timeout=40, every=1)
        # down 30 s at least (60 s in the full variant): the indexer backs off through it
        time.sleep(max(0.0, (60 if FULL else 30) - (time.monotonic() - down_since)))
    finally:
        start_postgres()
    wait_for("the operator's probe to find the database back", lambda: sample(
        "benchfarm_reachable", party="database") == 1.0, timeout=40, every=1)
    for name in names:
        wait_for(f"{name} in the history after the outage", lambda n=name: indexed(n),
                 timeout=60, every=2)


def test_a_new_regression_is_a_change_point_event_on_the_run_and_a_counter(custom):
    """Earlier runs of a plan measured twice the throughput (rows put in the database as the
    indexer would, dated before), later ones the same as the real run (dated after): the real
    run, the first after the step, gets the ChangePoint event once it is indexed, and the
    namespace's Notification of change points posts it to its webhook (issue 43). The plan's
    "benchmark" prints a fixed figure, so the step is there whatever the machine's load."""
    from kubernetes import client

    from benchfarm_devlab.lab import LAB_POLICY, apply_lab_policy
    from tests.receivers import WebhookReceiver
    port = devlab.PORTS.notify_receivers + 3
    policy = json.loads(json.dumps(LAB_POLICY))
    policy["spec"]["namespaces"][0]["webhookHosts"] = [f"127.0.0.1:{port}"]
    apply(json.dumps(policy))
    receiver = WebhookReceiver(port).start()
    apply(json.dumps({"apiVersion": "v1", "kind": "Secret",
                      "metadata": {"name": "benchfarm-notifications", "namespace": "default"},
                      "stringData": {"history": "history-key"}}))
    apply(json.dumps({"apiVersion": "benchfarm.io/v1alpha1", "kind": "Notification",
                      "metadata": {"name": "change-points", "namespace": "default"},
                      "spec": {"events": ["ChangePoint"], "webhook": {
                          "url": f"http://127.0.0.1:{port}/hook", "signingKey": "history"}}}))

    from benchfarm.history import Database
    plan = unique("stacktest-cp")
    metric = "probe/sysbench-cpu-events"
    apply(f"""
apiVersion: benchfarm.io/v1alpha1
kind: TestPlan
metadata: {{name: {plan}}}
spec:
  suites:
    - {{name: probe, suite: sysbench, command: "echo 'events per second: 500.00'", timeoutSeconds: 30}}
""")
    db = Database.from_settings(Settings.from_env())
    db.migrate()
    now = dt.datetime.now(dt.UTC)

    def row(i: int, when: dt.datetime, samples: list[float]) -> dict:
        return {"run_uid": f"{plan}-{i}", "side": "", "metric": metric, "unit": "events/s",
                "higher_is_better": True, "samples": samples, "mean": sum(samples) / len(samples),
                "n": len(samples), "namespace": "default", "name": f"{plan}-other-{i}",
                "plan": plan, "plan_digest": None, "device_type": "qemu-x86", "board": "vb-x86-0",
                "software": "", "software_digests": {}, "kernel_release": None, "labels": {},
                "time": when}
    db.upsert([row(i, now - dt.timedelta(days=20 - i), [1000.0 + i % 3, 1001.0, 999.0])
               for i in range(12)]
              + [row(100 + i, now + dt.timedelta(hours=1 + i), [500.0 + i % 2, 500.0, 499.0])
                 for i in range(4)])
    name = unique("hist-cp")
    apply(run_yaml(name, plan=plan, bootCycles=1, iterations=3))
    assert cond(finished(custom, name))["status"] == "True"

    def events():
        return [e for e in client.CoreV1Api(custom.api_client).list_namespaced_event(
            "default", field_selector=f"involvedObject.name={name}").items
            if e.reason == "ChangePoint"]
    event = wait_for(f"the ChangePoint event on {name}", events, timeout=60)[0]
    assert event.type == "Warning" and "regressed -50" in event.message and plan in event.message
    assert sample("benchfarm_change_points_total", device_type="qemu-x86", plan=plan) == 1.0
    try:
        (posted,) = wait_for("the ChangePoint at the namespace's webhook",
                             lambda: receiver.bodies(), timeout=60)
    finally:
        receiver.stop()
        devlab.kubectl("delete", "notification", "change-points", "-n", "default", capture=True)
        apply_lab_policy()
    body = json.loads(posted)
    assert body["kind"] == "ChangePoint" and body["object"]["name"] == name, body
    assert body["details"]["metric"] == metric and body["details"]["plan"] == plan, body
