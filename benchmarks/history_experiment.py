#!/usr/bin/env python3
"""Does the history find the build that made a metric slower, and only that? (make history-experiment)

On the embedded lab's arm64 board with a deterministic clock (vb-icount-0, `qemu-arm64-a53-icount`:
U-Boot loads the run's kernel over TFTP, `spec.software`; QEMU's instruction counter is the guest's
clock, so a figure depends on the instructions the software executes, not on the host's load),
two series of real runs of one plan (hackbench: processes talking through pipes, lower is
better), each run booting Debian's cloud kernel from the lab's builds/:
- "step": runs 1-12 boot it as it is (software `cloud`), runs 13-20 with `slub_debug=P`
  (software `cloud-slub-poison`: every slab object poisoned when freed and checked when
  allocated; hackbench, which allocates a socket buffer for every message, 15-20 % slower);
- "quiet": 20 runs of `cloud`.
Runs go one after another (the lab has one such board), each indexed by the operator. Then it
prints both histories with their change points (`benchfarm.history.history`) and the false alarms
over RESAMPLED quiet series (20 runs drawn, with replacement, from the quiet runs and the step
series' first 12: the samples real runs measured). Takes about 40 minutes.

On the plain TCG board (`--device-type qemu-arm64-a53`, 4 vCPUs in host threads) the same kernel's
hackbench varied 4x within one run on a loaded host (8.3-31.5 s) and 5-25 s between runs: no build
was found whose slowdown stands out of that (maxcpus=1, init_on_alloc/free, kpti=1 were tried).
Usage: history_experiment.py [--runs 20] [--step-at 13] [--resampled 100] [--device-type T]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
import uuid

import benchfarm_devlab as devlab
from benchfarm.core.statistics.changepoints import detect
from benchfarm.history import Database, history
from benchfarm.settings import Settings

DEVICE_TYPE = "qemu-arm64-a53-icount"
METRIC = "hackbench/hackbench-time"
SLOWER = "slub_debug=P"
KERNEL = {"url": "s3://benchfarm-artifacts/builds/qemu-arm64/debian-cloud-arm64/vmlinuz",
          "sha256Url": "s3://benchfarm-artifacts/builds/qemu-arm64/debian-cloud-arm64/SHA256SUMS"}


def plan(name: str) -> dict:
    return {"apiVersion": "benchfarm.io/v1alpha1", "kind": "TestPlan", "metadata": {"name": name},
            "spec": {"suites": [{"name": "hackbench", "suite": "hackbench",
                                 "command": "hackbench -g 2 -l 50", "timeoutSeconds": 120}]}}


def run(name: str, plan_name: str, slower: bool, device_type: str = DEVICE_TYPE) -> dict:
    software = {"name": "cloud-slub-poison" if slower else "cloud", "kernel": KERNEL,
                "bootArgs": SLOWER if slower else "benchfarm.build=cloud"}
    return {"apiVersion": "benchfarm.io/v1alpha1", "kind": "BenchmarkRun",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"benchfarm.io/experiment": "history"}},
            "spec": {"selector": {"deviceType": device_type}, "plan": plan_name,
                     "bootCycles": 1, "iterations": 3, "timeoutSeconds": 600,
                     "software": software}}


def apply(obj: dict) -> None:
    devlab.kubectl("apply", "-f", "-", input=json.dumps(obj), capture=True)


def phase(name: str) -> str:
    return devlab.kubectl("get", "br", name, "-o", "jsonpath={.status.phase}",
                          capture=True).stdout


def series(runs: int, plan_name: str, step_at: int | None, device_type: str) -> list[str]:
    apply(plan(plan_name))
    names = []
    for i in range(1, runs + 1):
        name = f"{plan_name}-{i:02d}-{uuid.uuid4().hex[:4]}"
        apply(run(name, plan_name, step_at is not None and i >= step_at, device_type))
        t0 = time.monotonic()
        while (p := phase(name)) not in ("Succeeded", "Failed", "Cancelled"):
            time.sleep(2)
        print(f"  {name}: {p} in {time.monotonic() - t0:.0f} s", flush=True)
        names.append(name)
    return names


def wait_indexed(db: Database, plan_name: str, runs: int, device_type: str) -> dict:
    deadline = time.monotonic() + 120
    while True:
        doc = history(db, "default", METRIC, device_type, plan_name)
        if len(doc["series"]) >= runs or time.monotonic() > deadline:
            return doc
        time.sleep(2)


def show(doc: dict) -> None:
    from benchfarm.history.commands import table
    print(table(doc))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--step-at", type=int, default=13)
    ap.add_argument("--resampled", type=int, default=100)
    ap.add_argument("--device-type", default=DEVICE_TYPE)
    args = ap.parse_args()
    tag = uuid.uuid4().hex[:4]
    step_plan, quiet_plan = f"hist-step-{tag}", f"hist-quiet-{tag}"
    os.environ.update({k: v for k, v in devlab.lab_env().items() if k != "PATH"})
    db = Database.from_settings(Settings.from_env())
    print(f"step series ({args.runs} runs, the slower build from run {args.step_at}):", flush=True)
    series(args.runs, step_plan, args.step_at, args.device_type)
    print(f"quiet series ({args.runs} runs):", flush=True)
    series(args.runs, quiet_plan, None, args.device_type)
    step = wait_indexed(db, step_plan, args.runs, args.device_type)
    quiet = wait_indexed(db, quiet_plan, args.runs, args.device_type)
    show(step)
    show(quiet)
    points = step["changePoints"]
    print(f"\nstep series: {len(points)} change point(s): " + "; ".join(
        f"at run {p['index'] + 1} ({p['run']}, software {p['software']}) {p['direction']} "
        f"{p['magnitude']:+.1f} % p={p['pvalue']:.2g}" for p in points))
    print(f"quiet series: {len(quiet['changePoints'])} change point(s)")
    pool = [s["samples"] for s in quiet["series"]] + \
        [s["samples"] for s in step["series"][:args.step_at - 1]]
    rng = random.Random(24)
    alarms = sum(bool(detect([rng.choice(pool) for _ in range(args.runs)],
                                  step["higherIsBetter"]))
                 for _ in range(args.resampled))
    print(f"false alarms over {args.resampled} quiet series of {args.runs} runs resampled from "
          f"the {len(pool)} runs of the unchanged build: {alarms}")


if __name__ == "__main__":
    main()
