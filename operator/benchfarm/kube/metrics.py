"""Prometheus metrics of the lab: queue depth, wait time, board utilisation, infrastructure failures.

Served on BENCHFARM_METRICS_PORT (the chart's Service scrapes it); 0 or unset turns it off.
"""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

REGISTRY = CollectorRegistry(auto_describe=True)
QUEUE_DEPTH = Gauge("benchfarm_queue_depth", "Runs waiting for a board", registry=REGISTRY)
RUNNING = Gauge("benchfarm_runs_running", "Runs on a board now", registry=REGISTRY)
BOARDS = Gauge("benchfarm_boards", "Boards by state", ["state"], registry=REGISTRY)
UTILISATION = Gauge("benchfarm_board_utilisation_ratio",
                    "Share of online boards running a benchfarm run", registry=REGISTRY)
QUEUE_WAIT = Histogram("benchfarm_queue_wait_seconds", "From creation to board acquisition",
                       buckets=(1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 48 * 3600),
                       registry=REGISTRY)
INFRA_FAILURES = Counter("benchfarm_infra_failures_total", "Infrastructure errors by board",
                         ["board", "reason"], registry=REGISTRY)
FINISHED = Counter("benchfarm_runs_finished_total", "Finished runs", ["phase", "reason"],
                   registry=REGISTRY)


def serve() -> int | None:
    port = int(os.environ.get("BENCHFARM_METRICS_PORT", "0") or 0)
    if port:
        start_http_server(port, addr=os.environ.get("BENCHFARM_METRICS_ADDR", "0.0.0.0"),
                          registry=REGISTRY)
        return port
    return None


def observe_lab(queued: int, running: int, states: list[str]) -> None:
    QUEUE_DEPTH.set(queued)
    RUNNING.set(running)
    for state in ("Idle", "Busy", "Quarantined", "Offline", "Maintenance"):
        BOARDS.labels(state).set(sum(1 for s in states if s == state))
    online = sum(1 for s in states if s not in ("Offline",))
    UTILISATION.set(running / online if online else 0.0)
