"""`make demo`: a real BenchmarkRun on a virtual board, from `kubectl apply` to the results table."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from benchfarm.cli import readback
from benchfarm.settings import Settings
from benchfarm_devlab import lab
from benchfarm_devlab.config import REPO
from benchfarm_devlab.env import kubectl, lab_env

FINISHED = {"Succeeded", "Failed", "Cancelled"}


def _get(ns: str, name: str) -> dict:
    out = kubectl("get", "benchmarkrun", "-n", ns, name, "-o", "json", capture=True, check=False)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def demo(manifest: str | None = None) -> int:
    t0 = time.monotonic()
    lab.up()
    os.environ.update({k: v for k, v in lab_env().items() if k != "PATH"})
    lab.start_operator()
    return 0 if run_demo(manifest, t0, Settings.from_env()).ok else 1


@dataclass
class DemoRun:
    ok: bool                          # it Succeeded
    power_on_s: float | None = None   # kubectl apply -> the first power-on
    ratio: float | None = None        # apply -> Succeeded seen, over boots + suites on the console


def run_demo(manifest: str | None, t0: float, settings: Settings, after=None) -> DemoRun:
    """Apply the demo run, follow it, print its results table and its e2e-to-console ratio
    (read as `settings`, the demo's, say). `after(namespace, name, applied, first_power_on)`
    (wall clock) may print more about the run."""
    path = Path(manifest) if manifest else REPO / "testplans" / "examples" / "demo-run.yaml"
    body = yaml.safe_load(path.read_text())
    ns, name = body["metadata"].get("namespace", "default"), body["metadata"]["name"]
    kubectl("delete", "benchmarkrun", "-n", ns, name, "--ignore-not-found", "--wait=true",
            capture=True)
    print(f"[demo] kubectl apply -f {path.relative_to(REPO)}")
    applied_wall = time.time()
    kubectl("apply", "-f", str(path))
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
        time.sleep(0.25)
    finished_wall = time.time()     # when the end was seen (polled every 0.25 s)
    print()
    kubectl("get", "benchmarkrun", "-n", ns, name)
    print()
    if status.get("artifacts"):
        print(readback.report(settings, f"{ns}/{name}"))
        print("Artifacts (MinIO at " + lab_env()["BENCHFARM_S3_ENDPOINT"] + "):")
        for url in status["artifacts"]:
            print(f"  {url}")
    doc = readback.metrics(settings, f"{ns}/{name}") if status.get("artifacts") else None
    result = DemoRun(ok=False)
    if doc and doc.get("powerOnTimes"):
        console = sum(b.get("power-to-prompt", 0) for b in doc["boots"]) + \
            sum(r["seconds"] for r in doc["records"])
        e2e = finished_wall - applied_wall
        result.power_on_s, result.ratio = doc["powerOnTimes"][0] - applied_wall, e2e / console
        print(f"[demo] kubectl apply -> first power-on: {result.power_on_s:.1f} s; "
              f"apply -> Succeeded seen: {e2e:.1f} s; boots + suites on the console: "
              f"{console:.1f} s; ratio {result.ratio:.2f}x")
        if after is not None:
            after(ns, name, applied_wall, doc["powerOnTimes"][0])
    cond = next((c for c in status.get("conditions", []) if c["type"] == "Succeeded"), {})
    print(f"\n[demo] {name}: Succeeded={cond.get('status')} reason={cond.get('reason')} "
          f"({cond.get('message', '')}); {time.monotonic() - t0:.0f} s in all")
    print(f"[demo] try: source .benchfarm/env && kubectl get br,boards && "
          f"kubectl describe br {name}")
    result.ok = cond.get("status") == "True"
    return result
