#!/usr/bin/env python3
"""The results database at a lab's size: prints figures, asserts nothing (make bench-history).

A generated year of nightly runs (RUNS days x TYPES board types, each run METRICS metrics of
SAMPLES samples: 365 x 20 x 200 = 1.46 M rows by default) is loaded with COPY into its own
database `benchfarm_bench` on the lab's PostgreSQL (the lab's index is left alone), a tenth of the
series with a step (a regression or an improvement) somewhere in the year. Then:
- one metric's history with its change points (`benchfarm.history.history`, what `benchfarm
  history` and the web page call), for random series: median, p95 and longest;
- the dashboard's history page for random series: `benchfarm web` as a process on that database,
  asked over HTTP by a person whose token may read the runs (median, p95, longest; the page is
  whole: its inline SVG chart has every run's point), and the same page loaded in Chromium
  (navigation start to the load event, median and longest);
- indexing a finished run (a metrics.json of METRICS series put in the lab's MinIO, read and
  upserted by `benchfarm.history.index.index_run`, what the operator's indexer does): median and
  longest; and the change points of every series of that run, which the indexer looks for next.
Usage: history_bench.py [--days 365] [--types 20] [--metrics 200] [--samples 5] [--keep]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import uuid

import psycopg

import benchfarm_devlab as devlab
from benchfarm.history import Database, history
from benchfarm.history.index import index_run
from benchfarm.store.artifacts import ArtifactStore, StoreConfig
from benchfarm_devlab.postgres import url as lab_url

BENCH_DB = "benchfarm_bench"
PLAN = "nightly"
COLUMNS = ("run_uid", "side", "metric", "unit", "higher_is_better", "samples", "mean", "n",
           "namespace", "name", "plan", "plan_digest", "device_type", "board", "software",
           "software_digests", "kernel_release", "labels", "time")


def fresh_database() -> Database:
    with psycopg.connect(lab_url("postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB}")
        conn.execute(f"CREATE DATABASE {BENCH_DB}")
    db = Database(lab_url(BENCH_DB))
    db.migrate()
    return db


def generate(db: Database, days: int, types: int, metrics: int, samples: int,
             rng: random.Random) -> int:
    start = dt.datetime(2025, 1, 1, 2, 0, tzinfo=dt.UTC)
    base = {(t, m): rng.uniform(10, 1000) for t in range(types) for m in range(metrics)}
    steps = {key: (rng.randrange(days // 4, 3 * days // 4), rng.choice((-0.1, 0.08)))
             for key in base if rng.random() < 0.1}
    rows = 0
    conn = psycopg.connect(lab_url(BENCH_DB))
    with conn, conn.cursor() as cur:
        cur.execute("DROP INDEX results_ns_series")
        with cur.copy(f"COPY results ({', '.join(COLUMNS)}) FROM STDIN") as copy:
            for day in range(days):
                when = start + dt.timedelta(days=day)
                for t in range(types):
                    uid = str(uuid.UUID(int=rng.getrandbits(128)))
                    name = f"nightly-{t:02d}-{day:03d}"
                    software = f"build-{day // 7:03d}"
                    run_scale = 1 + rng.gauss(0, 0.01)
                    for m in range(metrics):
                        centre = base[t, m] * run_scale
                        if (t, m) in steps and day >= steps[t, m][0]:
                            centre *= 1 + steps[t, m][1]
                        values = [round(centre * (1 + rng.gauss(0, 0.02)), 4)
                                  for _ in range(samples)]
                        copy.write_row((uid, "", f"suite-{m // 10:02d}/metric-{m:03d}", "ops/s",
                                        True, values, sum(values) / samples, samples,
                                        "nightly", name, PLAN, "sha256:bench",
                                        f"board-type-{t:02d}", f"board-{t:02d}-0", software,
                                        "{}", "6.12.0", "{}", when))
                        rows += 1
        cur.execute("CREATE INDEX results_ns_series ON results "
                    "(namespace, metric, device_type, plan, time)")
        cur.execute("ANALYZE results")
    conn.close()
    return rows


def metrics_json(metrics: int, samples: int, rng: random.Random) -> dict:
    uid = str(uuid.uuid4())
    series = [{"step": f"suite-{m // 10:02d}", "name": f"metric-{m:03d}", "unit": "ops/s",
               "higherIsBetter": True,
               "values": [rng.uniform(90, 110) for _ in range(samples)]} for m in range(metrics)]
    return {"run": {"namespace": "nightly", "name": f"bench-{uid[:8]}", "uid": uid,
                    "board": "board-00-0", "deviceType": "board-type-00", "plan": PLAN,
                    "labels": {"benchfarm.io/release": "bench"},
                    "finishedAt": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")},
            "provenance": {"kernelRelease": "6.12.0", "planDigest": "sha256:bench"},
            "series": series, "boots": [], "bootSummary": {}}


VIEWER = """
apiVersion: v1
kind: Namespace
metadata: {name: nightly}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: viewer, namespace: nightly}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: run-reader, namespace: nightly}
rules: [{apiGroups: [benchfarm.io], resources: [benchmarkruns], verbs: [get, list, watch]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: viewer-reads-runs, namespace: nightly}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: run-reader}
subjects: [{kind: ServiceAccount, name: viewer, namespace: nightly}]
"""


def dashboard_pages(args: argparse.Namespace, rng: random.Random) -> None:
    """The history page of `benchfarm web` on the generated database: HTTP, then Chromium."""
    devlab.kubectl("apply", "-f", "-", input=VIEWER, capture=True)
    token = devlab.kubectl("create", "token", "viewer", "-n", "nightly", capture=True
                           ).stdout.strip()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, **devlab.lab_env(), "BENCHFARM_DATABASE_URL": lab_url(BENCH_DB)}
    web = subprocess.Popen([sys.executable, "-m", "benchfarm.cli", "web", "--address",
                            "127.0.0.1", "--port", str(port)], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/healthz", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

        def url() -> str:
            m = rng.randrange(args.metrics)
            return base + "/history?" + urllib.parse.urlencode({
                "namespace": "nightly", "metric": f"suite-{m // 10:02d}/metric-{m:03d}",
                "deviceType": f"board-type-{rng.randrange(args.types):02d}", "plan": PLAN})

        times = []
        for i in range(args.queries + 1):
            req = urllib.request.Request(url(), headers={"Authorization": f"Bearer {token}"})
            t = time.perf_counter()
            page = urllib.request.urlopen(req, timeout=30).read().decode()
            if i:                   # the first loads SQLAlchemy and meets the token
                times.append(time.perf_counter() - t)
            points = page.count('<circle class="point"')
            assert points == args.days, f"the page charts {points} runs, not {args.days}"
        times.sort()
        print(f"the dashboard's history page ({args.days} runs charted, HTTP, {args.queries} "
              f"random series): median {ms(statistics.median(times))}, p95 "
              f"{ms(times[int(0.95 * (len(times) - 1))])}, longest {ms(times[-1])}")
        if shutil.which("chromium") and shutil.which("chromedriver"):
            browser_pages(base, token, url, args.days)
    finally:
        web.terminate()
        web.wait(10)


def browser_pages(base: str, token: str, url, days: int) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    profile = tempfile.mkdtemp(prefix="benchfarm-chromium-")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--window-size=1366,900",
                 f"--user-data-dir={profile}"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(options=opts, service=Service("/usr/bin/chromedriver"))
    try:
        driver.get(base + "/signin")
        driver.find_element(By.ID, "token").send_keys(token)
        driver.find_element(By.ID, "signin").click()
        loads = []
        for i in range(6):
            driver.get(url())
            nav = driver.execute_script(
                "const n = performance.getEntriesByType('navigation')[0];"
                "return [n.loadEventEnd, document.querySelectorAll('circle.point').length];")
            assert nav[1] == days, f"Chromium shows {nav[1]} points, not {days}"
            if i:
                loads.append(nav[0] / 1000)
        print(f"  in Chromium (navigation start to load event, 5 pages): median "
              f"{ms(statistics.median(loads))}, longest {ms(max(loads))}")
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=int, default=365)
    ap.add_argument("--types", type=int, default=20)
    ap.add_argument("--metrics", type=int, default=200)
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--keep", action="store_true", help="keep the generated database")
    args = ap.parse_args()
    rng = random.Random(24)
    env = devlab.lab_env()
    store = ArtifactStore(StoreConfig(env["BENCHFARM_S3_ENDPOINT"], env["BENCHFARM_S3_ACCESS_KEY"],
                                      env["BENCHFARM_S3_SECRET_KEY"], env["BENCHFARM_S3_BUCKET"]))
    db = fresh_database()
    t0 = time.monotonic()
    rows = generate(db, args.days, args.types, args.metrics, args.samples, rng)
    load = time.monotonic() - t0
    with db.engine.connect() as conn:
        from sqlalchemy import text
        size = conn.execute(text("SELECT pg_size_pretty(pg_total_relation_size('results'))")
                            ).scalar()
    print(f"generated {rows:,} rows ({args.days} days x {args.types} board types x "
          f"{args.metrics} metrics, {args.samples} samples each) in {load:.0f} s; table {size}")

    times, points = [], 0
    for _ in range(args.queries):
        m = rng.randrange(args.metrics)
        metric = f"suite-{m // 10:02d}/metric-{m:03d}"
        t = time.perf_counter()
        doc = history(db, "nightly", metric, f"board-type-{rng.randrange(args.types):02d}", PLAN)
        times.append(time.perf_counter() - t)
        points += len(doc["changePoints"])
        assert len(doc["series"]) == args.days
    times.sort()
    print(f"one metric's history ({args.days} runs) with its change points, {args.queries} "
          f"random series: median {ms(statistics.median(times))}, p95 "
          f"{ms(times[int(0.95 * (len(times) - 1))])}, longest {ms(times[-1])} "
          f"({points} change points found)")

    dashboard_pages(args, rng)

    idx, cps = [], []
    for _ in range(5):
        doc = metrics_json(args.metrics, args.samples, rng)
        key = f"nightly/{doc['run']['name']}/{doc['run']['uid']}/metrics.json"
        store.put(key, json.dumps(doc).encode(), "application/json")
        t = time.perf_counter()
        n = index_run(db, store, key)
        idx.append(time.perf_counter() - t)
        assert n == args.metrics
        t = time.perf_counter()
        for namespace, metric, device_type, plan in db.run_series(doc["run"]["uid"]):
            history(db, namespace, metric, device_type, plan)
        cps.append(time.perf_counter() - t)
    print(f"indexing a finished run ({args.metrics} metrics, read from MinIO and upserted): "
          f"median {ms(statistics.median(idx))}, longest {ms(max(idx))}")
    print(f"then the change points of its {args.metrics} series (the indexer's next step, off "
          f"any run's path): median {statistics.median(cps):.1f} s")
    db.close()
    if not args.keep:
        with psycopg.connect(lab_url("postgres"), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB}")


if __name__ == "__main__":
    main()
