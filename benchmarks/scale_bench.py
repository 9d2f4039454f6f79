#!/usr/bin/env python3
"""make bench-scale: a lab of 1,000 boards and 10,000 queued runs on the real stack.

Everything between `kubectl create` and a board's serial port is the product: the lab's
kube-apiserver and etcd, the labgrid coordinator with 1,000 places exported by a real
labgrid-exporter, the operator, and a session process per run (the `process` launcher) that
acquires its place, power-cycles the board through labgrid, times the boot from the serial
console, runs its suite on the board's shell and uploads to MinIO. Only the boards are simulated
(exporters/simulated/simboards.py: a boot log at a board's pace, then a shell).

The queue: 10,000 runs from 20 namespaces, priorities 0/100/200, selectors by device type + pool
(60 %), by rack (20 %), by board (15 %) and 5 % asking for the rack whose boards a person holds in
labgrid (they match no free board, ever: the scheduler's worst case). Phases:
1. flood: create the runs, then let the lab work for `--window` seconds; the host runs at most
   `--sessions` sessions holding a board at once (BENCHFARM_MAX_SESSIONS);
2. probes: a LabPolicy pauses the 20 teams (their 9,000-odd runs stay queued); runs of a 21st
   namespace go one by one (`--probes` of them) to free probe boards: apply → power-on;
3. restart: the operator is stopped and started with everything still queued: resync time.

Figures (printed, and written to .benchfarm/bench-scale.json): operator peak RSS; resync; API
writes per finished run (the API server's audit log); scheduling round p50/p99/max (the operator's
own timing of each round, under its lock); apply → power-on p50/p99 with a free board; board freed
(session's power-off) → next run powered, p50/p99; coordinator places() read; runs finished per
minute against what the sessions' board time allows (their capacity, or fewer where fewer runs that
could run arrived); the most boards powered
at once (never more than the sessions: each is a session holding its board).

Usage: scale_bench.py [--boards 1000] [--runs 10000] [--sessions 12] [--standby N] [--window 240]
                      [--probes 100] [--probe-boards 20]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import benchfarm_devlab as devlab  # noqa: E402
from benchfarm.lab.coordinator import Coordinator  # noqa: E402
from benchfarm.settings import Settings
from benchfarm_devlab import scale  # noqa: E402

GROUP_VERSION = "benchfarm.io/v1alpha1"
PLAN = "scale-work"
TEAMS = 20
PROBE_NS = "scale-probe"
RACK = 20                     # boards per rack label
HELD_RACK = "held"
OPERATOR_LOG = devlab.STATE / "logs" / "benchfarm-operator.log"


def teams() -> list[str]:
    return [f"scale-team-{i:02d}" for i in range(TEAMS)]


def percentile(values: list[float], q: float) -> float:
    """The q-th quantile (0.5, 0.99), interpolated between ranks: of 100 probes, p99 lies
    between the two slowest rather than being the slowest."""
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def kubectl(*args: str, input: str | None = None) -> str:
    res = devlab.kubectl(*args, check=False, capture=True, input=input)
    if res.returncode != 0:
        raise SystemExit(f"bench-scale: kubectl {' '.join(args)}: {res.stderr.strip()[-400:]}")
    return res.stdout


def metrics() -> dict[str, float]:
    url = f"http://127.0.0.1:{devlab.PORTS.operator_metrics}/metrics"
    out = {}
    with urllib.request.urlopen(url, timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
    return out


def wait_metric(key: str, ok, timeout: float) -> float:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            m = metrics()
            if key in m and ok(m[key]):
                return m[key]
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"bench-scale: {key} not as expected within {timeout:.0f} s")


def rss_mib(pid: int) -> tuple[float, float]:
    """(current, peak) resident memory of a process, MiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                  if ":" in line)
    return (int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024)


# -- the lab and the queue ------------------------------------------------------------------------
def board_tags(boards: int, probe_boards: int):  # noqa: ANN201
    held = range(boards - probe_boards - RACK // 2, boards - probe_boards)  # a person holds these

    def tags(i: int) -> dict[str, str]:
        if i >= boards - probe_boards:
            return {"pool": "probe"}
        if i in held:
            return {"pool": "held", "rack": HELD_RACK}
        return {"pool": "flood", "rack": f"r{i // RACK:02d}"}
    return tags, list(held)


def flood(runs: int, boards: int, probe_boards: int, seed: int = 12) -> list[dict]:
    rng = random.Random(seed)
    flood_boards = boards - probe_boards - RACK // 2
    racks = sorted({f"r{i // RACK:02d}" for i in range(flood_boards)})
    docs = []
    for k in range(runs):
        roll = rng.random()
        if roll < 0.60:
            selector = {"deviceType": "sim-board", "labels": {"pool": "flood"}}
        elif roll < 0.80:
            selector = {"deviceType": "sim-board", "labels": {"rack": rng.choice(racks)}}
        elif roll < 0.95:
            selector = {"board": scale.place_name(rng.randrange(flood_boards))}
        else:
            selector = {"deviceType": "sim-board", "labels": {"rack": HELD_RACK}}
        docs.append({"apiVersion": GROUP_VERSION, "kind": "BenchmarkRun",
                     "metadata": {"name": f"run-{k:05d}", "namespace": teams()[k % TEAMS]},
                     "spec": {"plan": PLAN, "selector": selector,
                              "priority": rng.choice((0, 100, 100, 200))}})
    return docs


def create_all(docs: list[dict], parallel: int = 2, chunk: int = 500,
               rate: float = 0.0) -> float:
    """`kubectl create` in chunks, `parallel` at a time; seconds. `rate`: at most that many
    runs a second (one chunk every 5 s, one at a time), as on a host whose API server is busy;
    0: as fast as the API server takes them."""
    if rate > 0:
        parallel, chunk = 1, max(1, round(rate * 5))
    chunks = [docs[i:i + chunk] for i in range(0, len(docs), chunk)]
    errors: list[str] = []
    t = time.monotonic()

    def worker(mine: list[list[dict]]) -> None:
        for i, c in enumerate(mine):
            if rate > 0:     # the i-th chunk not before its time
                time.sleep(max(0.0, t + i * len(c) / rate - time.monotonic()))
            res = devlab.kubectl("create", "-f", "-", check=False, capture=True,
                                 input=yaml.safe_dump_all(c))
            if res.returncode != 0:
                errors.append(res.stderr[-500:])
    threads = [threading.Thread(target=worker, args=(chunks[i::parallel],)) for i in range(parallel)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise SystemExit(f"bench-scale: creating runs failed: {errors[0]}")
    return time.monotonic() - t


def setup(args: argparse.Namespace) -> list[int]:
    devlab.up()
    os.environ.update({k: v for k, v in devlab.lab_env().items() if k != "PATH"})
    tags, held = board_tags(args.boards, args.probe_boards)
    t = scale.up(args.boards, tags=tags, boot_seconds=args.boot_seconds)
    print(f"[bench] {args.boards} simulated boards exported, places created in "
          f"{t['places_create_s']:.1f} s", flush=True)
    plan = {"apiVersion": GROUP_VERSION, "kind": "TestPlan", "metadata": {"name": PLAN},
            "spec": {"suites": [{"name": "work", "suite": "shell", "command": f"sleep {args.work}",
                                 "timeoutSeconds": 60}]}}
    kubectl("apply", "-f", "-", input=yaml.safe_dump(plan))
    for ns in [*teams(), PROBE_NS]:     # a namespace of an earlier bench may still be going
        deadline = time.monotonic() + 300
        while devlab.kubectl("get", "namespace", ns, "-o", "jsonpath={.status.phase}",
                             check=False, capture=True).stdout == "Terminating":
            if time.monotonic() > deadline:
                raise SystemExit(f"bench-scale: namespace {ns} of an earlier run is still "
                                 "being deleted")
            time.sleep(2)
        devlab.kubectl("create", "namespace", ns, check=False, capture=True)
    return held


def person_holds(boards: list[int], hold: bool) -> None:
    """A person (alice at her desk) locks these boards in labgrid, or lets them go. One client
    at a time: gRPC shares a process's connection and the coordinator refuses a second stream."""
    person = Coordinator.from_settings(Settings.from_env(), user="alice", host="desk")
    try:
        for i in boards:
            if hold:
                person.acquire(scale.place_name(i))
            else:
                try:
                    person.release(scale.place_name(i))
                except Exception:  # released already, or the lab went away: nothing to undo
                    pass
    finally:
        person.close()


def teardown() -> None:
    devlab.apply_lab_policy()   # the lab's own LabPolicy again
    for ns in [*teams(), PROBE_NS]:
        devlab.kubectl("delete", "namespace", ns, "--wait=false", check=False, capture=True)
    scale.down()


# -- figures --------------------------------------------------------------------------------------
def api_writes(namespaces: set[str], since: float) -> dict[tuple[str, str], int]:
    """BenchmarkRun writes (object and status) by anyone but kubectl, per run, from the audit log
    (from `since` on: an earlier bench had runs of the same names)."""
    from datetime import datetime
    counts: collections.Counter = collections.Counter()
    for log in sorted((devlab.STATE / "logs").glob("audit*.log")):
        with log.open(errors="replace") as f:
            for line in f:
                if '"benchmarkruns"' not in line:
                    continue
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                ref = ev.get("objectRef") or {}
                if ev.get("stage") != "ResponseComplete" or ref.get("namespace") not in namespaces \
                        or ref.get("resource") != "benchmarkruns" or not ref.get("name") \
                        or (ev.get("responseStatus") or {}).get("code", 200) >= 400 \
                        or ev.get("verb") not in ("create", "update", "patch", "delete"):
                    continue
                if (ev.get("userAgent") or "").startswith("kubectl"):
                    continue
                when = datetime.fromisoformat(ev["requestReceivedTimestamp"].replace("Z", "+00:00"))
                if when.timestamp() < since:
                    continue
                counts[(ref["namespace"], ref["name"])] += 1
    return counts


def freed_to_next(events: list[dict], t0: float, t1: float) -> list[float]:
    """Each board freed by a session (its power-off at the end) to the next run's power-on: the
    k-th freeing in the window opens the slot the k-th later power-on takes (slots are the
    binding limit while the queue is long)."""
    freed = sorted(e["t"] for e in events if e["power"] == "off" and e["was"] and t0 <= e["t"] <= t1)
    ons = sorted(e["t"] for e in events if e["power"] == "on" and t0 <= e["t"] <= t1)
    out, j = [], 0
    for f in freed:
        while j < len(ons) and ons[j] < f:
            j += 1
        if j == len(ons):
            break
        out.append(ons[j] - f)
        j += 1
    return out


def powered_at_once(events: list[dict], t0: float, t1: float) -> int:
    """The most boards powered at one moment between t0 and t1 (`events` in time order): each is a session holding its
    board (sessions power it off before they release it), so never more than the seats."""
    on: set[str] = set()
    most = 0
    for e in events:
        if e["t"] > t1:
            break
        (on.add if e["power"] == "on" else on.discard)(e["board"])
        if e["t"] >= t0:
            most = max(most, len(on))
    return most


def standby_env(args: argparse.Namespace) -> dict[str, str]:
    return {} if args.standby is None else {"BENCHFARM_STANDBY_SESSIONS": str(args.standby)}


def list_runs(namespace: str | None = None) -> list[dict]:
    """Runs as the API lists them, 500 at a time (no single 10,000-object answer)."""
    from kubernetes import client, config
    config.load_kube_config(config_file=os.environ["KUBECONFIG"])
    api = client.CustomObjectsApi()
    items, token = [], None
    while True:
        kw = {"limit": 500, **({"_continue": token} if token else {})}
        page = (api.list_namespaced_custom_object("benchfarm.io", "v1alpha1", namespace,
                                                  "benchmarkruns", **kw) if namespace else
                api.list_cluster_custom_object("benchfarm.io", "v1alpha1", "benchmarkruns", **kw))
        items += page["items"]
        token = page["metadata"].get("continue")
        if not token:
            return items


def phases(items: list[dict]) -> collections.Counter:
    return collections.Counter((i.get("status") or {}).get("phase") or "new" for i in items)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--boards", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=10000)
    ap.add_argument("--sessions", type=int, default=12)
    ap.add_argument("--standby", type=int, default=None,
                    help="sessions on standby (default: the operator's, as many as --sessions)")
    ap.add_argument("--window", type=float, default=240)
    ap.add_argument("--probes", type=int, default=100, help="probe runs (apply -> power-on)")
    ap.add_argument("--probe-boards", type=int, default=20,
                    help="free boards the probe runs take, a few at a time")
    ap.add_argument("--boot-seconds", type=float, default=2.0)
    ap.add_argument("--create-rate", type=float, default=0.0,
                    help="runs created a second at most (0: as fast as the API server takes "
                         "them; 3: a busy host's)")
    ap.add_argument("--work", type=float, default=2.0, help="seconds of the suite on the board")
    ap.add_argument("--json", default=str(devlab.STATE / "bench-scale.json"))
    ap.add_argument("--keep", action="store_true", help="leave the simulated lab up")
    args = ap.parse_args()
    t_all = time.monotonic()
    held = setup(args)
    try:
        person_holds(held, True)            # a person's lock: these boards are never free
        log_from = OPERATOR_LOG.stat().st_size if OPERATOR_LOG.exists() else 0
        pid = scale.start_operator(args.sessions, standby_env(args))
        wait_metric("benchfarm_schedule_rounds_total", lambda v: v >= 1, 120)
        figures = run_phases(args, pid, log_from)
    finally:
        person_holds(held, False)
        if not args.keep:
            teardown()
    figures["total_s"] = round(time.monotonic() - t_all, 1)
    Path(args.json).write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    print_table(figures, args)
    print(f"[bench] figures in {args.json}; {figures['total_s']:.0f} s in all")
    return 0


def slow_rounds(log_from: int) -> dict:
    """The operator's slow rounds (over its SLOW_ROUND), from its log since this bench started
    it: what the slowest round waited for."""
    with OPERATOR_LOG.open("rb") as f:
        f.seek(log_from)
        text = f.read().decode(errors="replace")
    rounds = [(float(m[1]), m[2]) for m in re.finditer(r"a slow round: (\d+) ms \((.*)\)$",
                                                        text, re.M)]
    return {"slow_rounds": len(rounds),
            "slowest_round": max(rounds)[1] if rounds else ""}


def run_phases(args: argparse.Namespace, pid: int, log_from: int) -> dict:
    docs = flood(args.runs, args.boards, args.probe_boards)
    t_flood = time.time()
    create_s = create_all(docs, rate=args.create_rate)
    print(f"[bench] {len(docs)} runs created in {create_s:.1f} s "
          f"({len(docs) / create_s:.0f}/s)", flush=True)
    t_window = time.time()
    peak = 0.0
    while time.time() - t_window < args.window:
        time.sleep(10)
        cur, peak = rss_mib(pid)
        m = metrics()
        print(f"[bench] {time.time() - t_window:5.0f} s: queued {m.get('benchfarm_queue_depth', 0):.0f}, "
              f"running {m.get('benchfarm_runs_running', 0):.0f}, operator RSS {cur:.0f} MiB",
              flush=True)
    t_window_end = time.time()
    # -- probes: the teams paused, a free board for each probe run
    policy = {"apiVersion": GROUP_VERSION, "kind": "LabPolicy", "metadata": {"name": "default"},
              "spec": {"namespaces": [{"namespace": ns, "maxBoards": 0} for ns in teams()]}}
    kubectl("apply", "-f", "-", input=yaml.safe_dump(policy))
    wait_metric("benchfarm_runs_running", lambda v: v == 0, 180)
    probe_boards = {scale.place_name(i) for i in range(args.boards - args.probe_boards, args.boards)}
    latencies = []
    for k in range(args.probes):
        seen = len(scale.power_events())
        run = {"apiVersion": GROUP_VERSION, "kind": "BenchmarkRun",
               "metadata": {"name": f"probe-{k:03d}", "namespace": PROBE_NS},
               "spec": {"plan": PLAN, "selector": {"deviceType": "sim-board",
                                                   "labels": {"pool": "probe"}}}}
        t = time.time()
        kubectl("create", "-f", "-", input=yaml.safe_dump(run))
        deadline = time.monotonic() + 60
        on = None
        while on is None and time.monotonic() < deadline:
            time.sleep(0.02)
            on = next((e for e in scale.power_events()[seen:] if e["power"] == "on"
                       and e["board"] in probe_boards and e["t"] >= t), None)
        if on is None:
            raise SystemExit(f"bench-scale: probe-{k:03d} not powered on within 60 s")
        latencies.append(on["t"] - t)
        time.sleep(1.0)
    # -- what the window did
    items = list_runs()
    flood_items = [i for i in items if i["metadata"]["namespace"] in set(teams())]
    done = [i for i in flood_items if (i.get("status") or {}).get("phase") == "Succeeded"]
    failed = [i for i in flood_items if (i.get("status") or {}).get("phase") == "Failed"]
    writes = api_writes(set(teams()), t_flood)
    per_run = [writes[(i["metadata"]["namespace"], i["metadata"]["name"])] for i in done]
    queued_writes = [writes[(i["metadata"]["namespace"], i["metadata"]["name"])]
                     for i in flood_items if (i.get("status") or {}).get("phase") == "Pending"]
    events = sorted(scale.power_events(), key=lambda e: e["t"])
    gaps = freed_to_next(events, t_window, t_window_end)
    powered = powered_at_once(events, t_flood, t_window_end)
    on_times = collections.defaultdict(list)
    board_time = []
    for e in events:
        if e["power"] == "on":
            on_times[e["board"]].append(e["t"])
        elif e["was"] and on_times[e["board"]] and t_flood <= e["t"] <= t_window_end:
            board_time.append(e["t"] - on_times[e["board"]][-1])
    m = metrics()
    slow = slow_rounds(log_from)
    _, peak = rss_mib(pid)
    # -- places() as the operator reads it (a fresh client; the coordinator may refuse a new
    # connection from a source port a departed client had, so try again with another)

    reads: list[float] = []
    for attempt in range(3):
        c = Coordinator.from_settings(Settings.from_env(), user="bench", host=f"bench-{attempt}")
        try:
            c.places()
            for _ in range(10):
                t = time.perf_counter()
                c.places()
                reads.append(time.perf_counter() - t)
            break
        except Exception as exc:
            print(f"[bench] reading places failed ({exc}); again", flush=True)
        finally:
            c.close()
    # -- restart with everything queued
    devlab.stop_process("benchfarm-operator")
    t = time.monotonic()
    pid2 = scale.start_operator(args.sessions, standby_env(args))
    wait_metric("benchfarm_schedule_rounds_total", lambda v: v >= 1, 600)
    resync = time.monotonic() - t
    recovery = metrics().get("benchfarm_recovery_seconds", float("nan"))
    _, peak2 = rss_mib(pid2)
    # runs finish from the first created one on: count them over creation and window together
    window_min = (t_window_end - t_flood) / 60
    own = statistics.mean(board_time) if board_time else float("nan")
    # what the sessions' board time allows over the window: their capacity, or the runs that
    # could run if fewer arrived (runs created slowly leave the lab no backlog; the held rack's
    # runs wait for a person by design)
    runnable = sum(1 for i in flood_items
                   if (i["spec"]["selector"].get("labels") or {}).get("rack") != HELD_RACK)
    capacity = args.sessions * 60 / own * window_min if board_time else float("nan")
    allowed = min(capacity, runnable)
    return {
        "boards": args.boards, "queued": args.runs, "sessions": args.sessions, "standby": args.standby,
        "create_per_s": round(len(docs) / create_s, 1),
        "rss_mib": round(max(peak, peak2), 1), "rss_after_restart_mib": round(peak2, 1),
        "resync_s": round(resync, 2), "recovery_s": round(recovery, 2),
        "writes_per_run": round(statistics.mean(per_run), 2) if per_run else None,
        "writes_per_run_max": max(per_run) if per_run else None,
        "writes_per_queued_run_max": max(queued_writes) if queued_writes else None,
        "round_p50_ms": round(m.get('benchfarm_schedule_round_seconds{quantile="0.5"}', 0) * 1000, 2),
        "round_p99_ms": round(m.get('benchfarm_schedule_round_seconds{quantile="0.99"}', 0) * 1000, 2),
        "round_max_ms": round(m.get('benchfarm_schedule_round_seconds{quantile="1"}', 0) * 1000, 2),
        "round_cpu_p99_ms": round(m.get('benchfarm_schedule_round_cpu_seconds{quantile="0.99"}', 0) * 1000, 2),
        "round_cpu_max_ms": round(m.get('benchfarm_schedule_round_cpu_seconds{quantile="1"}', 0) * 1000, 2),
        "rounds": int(m.get("benchfarm_schedule_rounds_total", 0)),
        "rounds_with_full_gc": int(m.get("benchfarm_schedule_rounds_with_full_collection_total", 0)),
        "full_gcs": int(m.get("benchfarm_gc_full_collections_total", 0)),
        "full_gc_longest_ms": round(m.get("benchfarm_gc_full_longest_seconds", 0) * 1000, 1),
        "apply_to_power_on_p50_s": round(percentile(latencies, 0.5), 3),
        "apply_to_power_on_p99_s": round(percentile(latencies, 0.99), 3),
        "apply_to_power_on_max_s": round(max(latencies), 3),
        "apply_to_power_on_s": [round(x, 3) for x in latencies],
        "freed_to_next_p50_s": round(percentile(gaps, 0.5), 3),
        "freed_to_next_p99_s": round(percentile(gaps, 0.99), 3),
        "places_ms": round(percentile(reads, 0.5) * 1000, 2),
        "places_operator_ms": round(m.get("benchfarm_places_seconds", 0) * 1000, 2),
        "seats_by_relay": int(m.get('benchfarm_session_seats_total{by="relay"}', 0)),
        "seats_by_go_ahead": int(m.get('benchfarm_session_seats_total{by="go-ahead"}', 0)),
        "relays_missed": int(m.get("benchfarm_relays_missed_total", 0)),
        "stale_events": int(m.get("benchfarm_stale_run_events_total", 0)),
        "off_owner_writes": int(sum(v for k, v in m.items()
                                    if k.startswith("benchfarm_off_owner_writes_total"))),
        "powered_max": powered,
        "finished": len(done), "failed": len(failed),
        "phases": dict(phases(flood_items)),
        "runs_per_min": round(len(done) / window_min, 1) if window_min else None,
        # what arrived over the same time: below the sessions' capacity (a slow --create-rate),
        # the lab can finish no more than that, whatever the capacity figure says
        "arrived_per_min": round(len(flood_items) / window_min, 1) if window_min else None,
        "runnable": runnable,
        "runnable_per_min": round(runnable / window_min, 1) if window_min else None,
        "allowed_per_min": round(allowed / window_min, 1) if window_min else None,
        "board_seconds_per_run": round(own, 2),
        "boards_alone_runs_per_min": round(args.sessions * 60 / own, 1) if board_time else None,
        "capacity_used": round(len(done) / allowed, 4) if board_time and allowed else 0.0,
        **slow,
        "window_s": round(t_window_end - t_window, 1),
        "window": [round(t_window, 3), round(t_window_end, 3)],
    }


def print_table(f: dict, args: argparse.Namespace) -> None:
    goals = {"rss_mib": ("< 512 MiB", f["rss_mib"] < 512),
             "resync_s": ("< 60 s", f["resync_s"] < 60),
             "writes_per_run": ("<= 10", (f["writes_per_run_max"] or 99) <= 10),
             "round_max_ms": ("< 50 ms", f["round_max_ms"] < 50),
             "apply_to_power_on_p99_s": ("< 1 s", f["apply_to_power_on_p99_s"] < 1),
             "freed_to_next_p99_s": ("< 2 s", f["freed_to_next_p99_s"] < 2),
             "places_ms": ("< 20 ms", f["places_ms"] < 20),
             "capacity_used": (">= 90 %", f["capacity_used"] >= 0.9),
             "powered_max": (f"<= {f['sessions']}", f["powered_max"] <= f["sessions"]),
             "off_owner_writes": ("0", f["off_owner_writes"] == 0)}
    rows = [
        ("operator RSS (peak)", f"{f['rss_mib']:.0f} MiB", "rss_mib"),
        ("resync after a restart", f"{f['resync_s']:.1f} s (reading back {f['recovery_s']:.1f} s)",
         "resync_s"),
        ("API writes per finished run", f"{f['writes_per_run']} (max {f['writes_per_run_max']}; "
         f"queued run max {f['writes_per_queued_run_max']})", "writes_per_run"),
        ("scheduling round p50/p99/max", f"{f['round_p50_ms']:.1f} / {f['round_p99_ms']:.1f} / "
         f"{f['round_max_ms']:.1f} ms ({f['rounds']} rounds)", "round_max_ms"),
        ("  its own CPU p99/max", f"{f['round_cpu_p99_ms']:.1f} / {f['round_cpu_max_ms']:.1f} ms "
         f"(the rest: waiting for the GIL, a CPU)", None),
        ("  slow rounds (> 50 ms)", f"{f['slow_rounds']}" + (f"; the slowest waited: "
         f"{f['slowest_round']}" if f["slow_rounds"] else ""), None),
        ("  records changed off the owner thread", f"{f['off_owner_writes']}",
         "off_owner_writes"),
        ("  full collections in rounds", f"{f['rounds_with_full_gc']} of {f['full_gcs']} "
         f"(longest {f['full_gc_longest_ms']:.0f} ms)", None),
        ("apply -> power-on, free board p50/p99", f"{f['apply_to_power_on_p50_s']:.2f} / "
         f"{f['apply_to_power_on_p99_s']:.2f} s (max {f['apply_to_power_on_max_s']:.2f} s of "
         f"{len(f['apply_to_power_on_s'])} probes)", "apply_to_power_on_p99_s"),
        ("board freed -> next powered p50/p99", f"{f['freed_to_next_p50_s']:.2f} / "
         f"{f['freed_to_next_p99_s']:.2f} s", "freed_to_next_p99_s"),
        ("coordinator places()", f"{f['places_ms']:.1f} ms (operator's last: "
         f"{f['places_operator_ms']:.1f} ms)", "places_ms"),
        ("standby sessions' seats by relay", f"{f['seats_by_relay']} of "
         f"{f['seats_by_relay'] + f['seats_by_go_ahead']} ({f['relays_missed']} relays missed)",
         None),
        ("boards powered at once (max)", f"{f['powered_max']} ({f['stale_events']} watch "
         f"events older than the operator's own writes passed over)", "powered_max"),
        ("runs finished per minute", f"{f['runs_per_min']} of {f['allowed_per_min']} "
         f"({f['capacity_used']:.1%}; the lesser of the next two)", "capacity_used"),
        ("  the sessions' capacity", f"{f['boards_alone_runs_per_min']} a minute "
         f"({f['sessions']} sessions of {f['board_seconds_per_run']:.1f} s board time)", None),
        ("  runs that could run", f"{f['runnable_per_min']} a "
         f"minute ({f['runnable']} created, none for the held rack; "
         f"{f.get('arrived_per_min')} a minute with them)", None),
    ]
    print(f"\nbench-scale: {f['boards']} boards, {f['queued']} runs from {TEAMS} namespaces "
          f"(created at {f['create_per_s']:.0f}/s), {f['window_s']:.0f} s window, "
          f"{f['finished']} finished, {f['failed']} failed")
    print(f"{'figure':40s} {'measured':58s} goal")
    for label, value, key in rows:
        goal = "" if key is None else f"{goals[key][0]:10s} {'met' if goals[key][1] else 'NOT met'}"
        print(f"{label:40s} {value:58s} {goal}")


if __name__ == "__main__":
    sys.exit(main())
