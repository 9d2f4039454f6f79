"""`make demo`: a real BenchmarkRun on a virtual board, from `kubectl apply` to the results table."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import yaml

from . import devlab

FINISHED = {"Succeeded", "Failed", "Cancelled"}


def _get(ns: str, name: str) -> dict:
    out = devlab.kubectl("get", "benchmarkrun", "-n", ns, name, "-o", "json", capture=True,
                         check=False)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def _store():
    import os
    from .store.artifacts import ArtifactStore, StoreConfig
    os.environ.update(devlab.lab_env())
    return ArtifactStore(StoreConfig.from_env())


def _metrics(run: str) -> dict | None:
    ns, _, name = run.partition("/")
    body = _get(ns, name)
    if not body:
        return None
    store = _store()
    prefix = store.run_prefix(ns, name, body["metadata"]["uid"],
                              body["spec"].get("artifactPrefix", ""))
    return json.loads(store.get(f"{prefix}/metrics.json"))


def compare_cli(run: str, baseline: str) -> int:
    """Print the comparison table of a run against a run or a vendor guide; 3 if regressed."""
    from .core.guide import as_baseline, parse_rst
    from .core.regression import RegressionPolicy, Sample, compare
    from .core.results import samples_by_metric_name, samples_from_document
    from .report.tables import comparison_markdown
    doc = _metrics(run)
    if doc is None:
        print(f"benchfarm compare: run {run} not found", file=sys.stderr)
        return 1
    policy = RegressionPolicy()
    if Path(baseline).is_file():
        guide = as_baseline(parse_rst(Path(baseline).read_text(errors="replace")))
        base = {k: Sample.summary(v.mean, v.min, v.max) for k, v in guide.items()}
        current, direction = samples_by_metric_name(doc)
    else:
        base_doc = _metrics(baseline)
        if base_doc is None:
            print(f"benchfarm compare: baseline {baseline} is neither a file nor a run",
                  file=sys.stderr)
            return 1
        base, _ = samples_from_document(base_doc)
        current, direction = samples_from_document(doc)
    rows = compare(base, current, direction, policy)
    if not rows:
        print("benchfarm compare: no metric in common", file=sys.stderr)
        return 1
    print(comparison_markdown(rows, policy.describe(), baseline))
    return 3 if any(r.verdict == "regressed" for r in rows) else 0


def report(run: str, fmt: str = "md") -> int:
    from .report.tables import markdown, rst
    ns, _, name = run.partition("/")
    body = _get(ns, name)
    if not body:
        print(f"benchfarm report: run {run} not found", file=sys.stderr)
        return 1
    uid = body["metadata"]["uid"]
    store = _store()
    prefix = store.run_prefix(ns, name, uid, body["spec"].get("artifactPrefix", ""))
    doc = json.loads(store.get(f"{prefix}/metrics.json"))
    print({"md": markdown, "rst": rst}.get(fmt, lambda d: json.dumps(d, indent=2))(doc))
    return 0


def demo(manifest: str | None = None) -> int:
    t0 = time.monotonic()
    devlab.up()
    devlab.start_operator()
    path = Path(manifest) if manifest else devlab.REPO / "testplans" / "examples" / "demo-run.yaml"
    body = yaml.safe_load(path.read_text())
    ns, name = body["metadata"].get("namespace", "default"), body["metadata"]["name"]
    devlab.kubectl("delete", "benchmarkrun", "-n", ns, name, "--ignore-not-found", "--wait=true",
                   capture=True)
    print(f"[demo] kubectl apply -f {path.relative_to(devlab.REPO)}")
    applied_wall = time.time()
    devlab.kubectl("apply", "-f", str(path))
    applied = time.monotonic()
    last = None
    status: dict = {}
    while time.monotonic() - applied < 1800:
        status = _get(ns, name).get("status", {})
        line = (status.get("phase"), status.get("board"), status.get("progress"),
                status.get("bootSeconds"))
        if line != last:
            print(f"[demo] {time.monotonic() - applied:6.1f} s  phase={line[0]} board={line[1]} "
                  f"progress={line[2]} boot={line[3]}", flush=True)
            last = line
        if status.get("phase") in FINISHED:
            break
        time.sleep(1)
    print()
    devlab.kubectl("get", "benchmarkrun", "-n", ns, name)
    print()
    if status.get("artifacts"):
        report(f"{ns}/{name}")
        print("Artifacts (MinIO at " + devlab.lab_env()["BENCHFARM_S3_ENDPOINT"] + "):")
        for url in status["artifacts"]:
            print(f"  {url}")
    finished_wall = time.time()
    doc = _metrics(f"{ns}/{name}") if status.get("artifacts") else None
    if doc and doc.get("powerOnTimes"):
        console = sum(b.get("power-to-prompt", 0) for b in doc["boots"]) + \
            sum(r["seconds"] for r in doc["records"])
        print(f"[demo] kubectl apply -> first power-on: {doc['powerOnTimes'][0] - applied_wall:.1f} s; "
              f"apply -> Succeeded seen: {finished_wall - applied_wall:.1f} s; boots + suites on the "
              f"console: {console:.1f} s")
    cond = next((c for c in status.get("conditions", []) if c["type"] == "Succeeded"), {})
    print(f"\n[demo] {name}: Succeeded={cond.get('status')} reason={cond.get('reason')} "
          f"({cond.get('message', '')}); {time.monotonic() - t0:.0f} s in all")
    print(f"[demo] try: source .benchfarm/env && kubectl get br,boards && "
          f"kubectl describe br {name}")
    return 0 if cond.get("status") == "True" else 1
