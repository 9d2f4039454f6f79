"""Issue 40 (item 3) on the real stack: the results history is per namespace.

Team A's four-four-four series (tests/stack/crossns.py: four runs of A at 1.0, four of team B at
0.5, four of A again, one inline plan on qemu-x86, through the real operator): merged, the runs
have a +100 % regression at A's fifth run, which the operator once raised as a ChangePoint event
on it; per namespace they have none. Team A's history, change points, events and menus (the CLI's
and the dashboard's, read with team A's own token) are those of its own runs; a metrics.json whose
identity is not its key's is skipped by `benchfarm results reindex`, which says so.
"""

from __future__ import annotations

import io
import json

import pytest

from benchfarm.core.statistics.changepoints import detect
from benchfarm.settings import Settings
from tests.stack.crossns import (
    DEVICE_TYPE,
    METRIC,
    OWN_STEP,
    PLAN,
    benchfarm,
    change_point_events,
    dashboard,
    http,
    series,
)

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def made(kube, operator):
    return series(kube)


@pytest.fixture(scope="module")
def web(made):
    with dashboard() as url:
        yield url


def cli_history(ns: str) -> dict:
    return json.loads(benchfarm("history", METRIC, "--device-type", DEVICE_TYPE, "--plan", PLAN,
                                "-n", ns, "--format", "json").stdout)


def test_team_as_change_points_and_events_are_its_own_runs_only(kube, made):
    a, b = made["a"], made["b"]
    from benchfarm.history import Database
    db = Database.from_settings(Settings.from_env())
    own = {ns: db.series_rows(ns, METRIC, DEVICE_TYPE, PLAN) for ns in (a, b)}   # time order
    rows = sorted(own[a] + own[b], key=lambda r: r["time"])
    # the runs as they ran, merged: what history across namespaces saw (the breach of issue 40):
    # an improvement at B's first run, a +100 % regression at A's fifth
    merged = detect([r["samples"] for r in rows], False)
    assert [(rows[p.index]["namespace"], rows[p.index]["name"], p.direction, round(p.magnitude))
            for p in merged] == [(b, own[b][0]["name"], "improvement", -50),
                                 (a, own[a][4]["name"], "regression", 100)]
    assert {r["name"] for r in own[a][:4]} == set(made["runs"][a][:4])
    mine, theirs = cli_history(a), cli_history(b)
    assert [p["run"] for p in mine["series"]] == [f"{a}/{r['name']}" for r in own[a]]
    assert sorted(p["run"] for p in mine["series"]) == sorted(f"{a}/{n}" for n in made["runs"][a])
    assert {p["uid"] for p in mine["series"]} == {made["uids"][f"{a}/{n}"] for n in made["runs"][a]}
    assert {p["mean"] for p in mine["series"]} == {1.0} and mine["changePoints"] == []
    assert sorted(p["run"] for p in theirs["series"]) == sorted(f"{b}/{n}" for n in made["runs"][b])
    assert {p["mean"] for p in theirs["series"]} == {0.5} and theirs["changePoints"] == []
    assert change_point_events(kube, a) == [] and change_point_events(kube, b) == []
    from sqlalchemy import select

    from benchfarm.history.schema import change_points
    with db.engine.connect() as conn:
        recorded = conn.execute(select(change_points).where(
            change_points.c.namespace.in_([a, b]))).all()
    assert recorded == []
    # a lab admin (the lab's kubeconfig: cluster-wide) sees both namespaces' series, each apart
    both = json.loads(benchfarm("history", METRIC, "--device-type", DEVICE_TYPE, "--plan", PLAN,
                                "--all-namespaces", "--format", "json").stdout)
    by_ns = {d["namespace"]: d for d in both}
    assert by_ns[a] == mine and by_ns[b] == theirs


def test_the_cli_lists_one_namespaces_series(made):
    a, b = made["a"], made["b"]
    listed = json.loads(benchfarm("results", "series", "-n", a, "--format", "json").stdout)
    assert {r["namespace"] for r in listed} == {a}
    assert {r["metric"] for r in listed} >= {METRIC}
    assert not [r for r in listed if r["metric"].startswith(OWN_STEP + "/")]
    theirs = json.loads(benchfarm("results", "series", "-n", b, "--format", "json").stdout)
    assert f"{OWN_STEP}/hackbench-time" in {r["metric"] for r in theirs}
    table = benchfarm("history", METRIC, "--device-type", DEVICE_TYPE, "--plan", PLAN,
                      "-n", a).stdout
    assert f"namespace {a}: 8 runs, 0 change point(s)" in table and f"{b}/" not in table


def test_team_as_dashboard_menus_hold_none_of_team_bs_step_names(made, web):
    a, b = made["a"], made["b"]
    token = made["tokens"][a]
    status, body = http(f"{web}/history?format=json", token)
    assert status == 200, body
    page = json.loads(body)
    assert page["namespaces"] == [a] and page["namespace"] == a
    assert METRIC in page["menus"]["metric"]
    assert not [m for m in page["menus"]["metric"] if m.startswith(OWN_STEP + "/")], page
    status, body = http(f"{web}/history?format=json&namespace={a}&metric={METRIC}"
                        f"&deviceType={DEVICE_TYPE}&plan={PLAN}", token)
    chart = json.loads(body)
    assert chart["known"] and chart["changePoints"] == []
    assert sorted(p["run"] for p in chart["series"]) == sorted(f"{a}/{n}" for n in made["runs"][a])
    # the HTML page: no step name, run or namespace of team B anywhere in it
    status, html = http(f"{web}/history?namespace={a}&metric={METRIC}"
                        f"&deviceType={DEVICE_TYPE}&plan={PLAN}", token)
    assert status == 200 and f"{a}/hb-4" in html
    assert OWN_STEP not in html and b not in html
    # asking for team B's series with team A's token shows nothing of it
    status, body = http(f"{web}/history?format=json&namespace={b}&metric={OWN_STEP}/"
                        f"hackbench-time&deviceType={DEVICE_TYPE}&plan={PLAN}", token)
    other = json.loads(body)
    assert status == 200 and other["namespaces"] == [a] and not other["known"], other
    assert other["series"] == [] and other["changePoints"] == [] and other["namespace"] == ""
    assert not [m for m in other["menus"]["metric"] if m.startswith(OWN_STEP + "/")], other
    # team B's person sees its own step in its menus
    page_b = json.loads(http(f"{web}/history?format=json", made["tokens"][b])[1])
    assert page_b["namespaces"] == [b] and f"{OWN_STEP}/hackbench-time" in page_b["menus"]["metric"]


def test_reindex_skips_a_document_whose_identity_is_not_its_keys(made):
    """Team B's metrics.json copied under a run key of team A (as a suite that could write the
    store would): reindex indexes everything else, skips it, counts it and names it."""
    a, b = made["a"], made["b"]
    from benchfarm.store.artifacts import ArtifactStore, StoreConfig
    store = ArtifactStore(StoreConfig.from_settings(Settings.from_env()))
    theirs = made["runs"][b][0]
    doc = store.get(f"{b}/{theirs}/{made['uids'][f'{b}/{theirs}']}/metrics.json")
    assert json.loads(doc)["run"]["namespace"] == b
    forged = f"{a}/forged/00000000-0000-0000-0000-000000000000/metrics.json"
    store.client.put_object(store.config.bucket, forged, io.BytesIO(doc), len(doc))
    before = {ns: cli_history(ns) for ns in (a, b)}
    try:
        done = benchfarm("results", "reindex")
    finally:
        store.client.remove_object(store.config.bucket, forged)
    out = done.stdout.strip()
    assert out.startswith("indexed ") and "skipped" in out, out
    skipped = int(out.split("skipped ", 1)[1].split()[0])
    assert skipped >= 1, out
    assert forged in done.stderr and f"names run {b}/{theirs}" in done.stderr, done.stderr
    assert {ns: cli_history(ns) for ns in (a, b)} == before


def test_migration_0002_keeps_the_rows_and_the_points_already_reported(lab):
    """A results database of revision 0001 (series across namespaces) with rows of two
    namespaces and a reported change point, in a database of its own on the lab's PostgreSQL:
    after `migrate` the rows read per namespace, the point belongs to its run's namespace (so it
    is not reported again), and downgrading and upgrading again keeps them."""
    import datetime as dt

    import psycopg
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import select

    from benchfarm.history import Database
    from benchfarm.history.db import MIGRATIONS
    from benchfarm.history.query import change_points as points_now
    from benchfarm.history.schema import change_points
    from benchfarm_devlab.postgres import url as lab_url
    name = "benchfarm_migration_test"
    with psycopg.connect(lab_url("postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    db = Database(lab_url(name))

    def to(revision: str, down: bool = False) -> None:
        with db.engine.begin() as conn:
            cfg = Config()
            cfg.set_main_option("script_location", str(MIGRATIONS))
            cfg.attributes["connection"] = conn
            (command.downgrade if down else command.upgrade)(cfg, revision)
    try:
        to("0001")
        now = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
        with db.engine.begin() as conn:
            for i, (ns, mean) in enumerate([("team-a", 1.0)] * 4 + [("team-b", 0.5)] * 4
                                           + [("team-a", 1.0)] * 4):
                conn.exec_driver_sql(
                    "INSERT INTO results (run_uid, side, metric, unit, higher_is_better, samples,"
                    " mean, n, namespace, name, plan, device_type, board, time) VALUES (%s, '', "
                    "'hb/hackbench-time', 's', false, %s, %s, 2, %s, %s, '(inline)', 'qemu-x86', "
                    "'vb-x86-0', %s)", (f"u-{i}", [mean, mean], mean, ns, f"run-{i}",
                                        now + dt.timedelta(hours=i)))
            conn.exec_driver_sql(
                "INSERT INTO change_points (metric, device_type, plan, run_uid, direction, "
                "magnitude, pvalue, reported) VALUES ('hb/hackbench-time', 'qemu-x86', "
                "'(inline)', 'u-8', 'regression', 100.0, 1e-6, now())")
        db.migrate()
        for _ in range(2):
            assert db.series_keys(None) == [("team-a", "hb/hackbench-time", "qemu-x86", "(inline)"),
                                            ("team-b", "hb/hackbench-time", "qemu-x86", "(inline)")]
            assert [r["name"] for r in db.series_rows("team-a", "hb/hackbench-time", "qemu-x86",
                                                      "(inline)")] == \
                [f"run-{i}" for i in (*range(4), *range(8, 12))]
            with db.engine.connect() as conn:
                kept = conn.execute(select(change_points.c.namespace, change_points.c.run_uid)
                                    ).all()
            assert [tuple(r) for r in kept] == [("team-a", "u-8")]
            assert points_now(db, "team-a", "hb/hackbench-time", "qemu-x86", "(inline)") == []
            to("0001", down=True)
            db.migrate()
    finally:
        db.close()
        with psycopg.connect(lab_url("postgres"), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name}")
