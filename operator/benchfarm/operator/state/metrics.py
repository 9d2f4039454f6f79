"""Prometheus metrics of the lab: queue depth, wait time, board utilisation, infrastructure failures,
leadership and the reach of the lab's services (the chart's alerting rules read those:
helm/benchfarm/files/alerts.yaml).

Served on BENCHFARM_METRICS_PORT (the chart's Service scrapes it) by every operator replica, the
standbys too (`benchfarm_leader` 0); 0 or unset turns it off.

Every label value comes from a bounded set the lab defines (a phase, a typed reason, a party, a
board state, a device type, a TestPlan's or a namespace's name): never a string a tenant or its
board chose (a suite's or a metric's name, a console line, a reason written into a run's status),
which would make a series per value and grow the operator and Prometheus without bound.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from benchfarm.api.boards import BoardState
from benchfarm.api.outcomes import BoardFaultKind, Reason, Refusal, RunFailure
from benchfarm.errors import Party

REGISTRY = CollectorRegistry(auto_describe=True)
QUEUE_DEPTH = Gauge("benchfarm_queue_depth", "Runs waiting for a board", registry=REGISTRY)
QUEUE_OLDEST = Gauge("benchfarm_queue_oldest_wait_seconds", "How long the run (or BoardLease) "
                     "of the queue waiting longest has waited since it was created (0: none "
                     "waits)", registry=REGISTRY)
LEADER = Gauge("benchfarm_leader", "1 while this operator leads (holds the Lease "
               "benchfarm-operator), 0 while it stands by", registry=REGISTRY)
REACHABLE = Gauge("benchfarm_reachable", "Whether the operator reached a service the lab "
                  "depends on at its last probe (party: store, database): 1 yes, 0 no",
                  ["party"], registry=REGISTRY)
RUNNING = Gauge("benchfarm_runs_running", "Runs on a board now", registry=REGISTRY)
STANDBY = Gauge("benchfarm_sessions_standby", "Sessions launched on standby, waiting for a "
                "session seat (BENCHFARM_MAX_SESSIONS) to take their board", registry=REGISTRY)
SEATS = Counter("benchfarm_session_seats_total", "Session seats a standby session took: by a "
                "relay (the seat it was named, the moment its holder released the place) or by a "
                "go-ahead the operator wrote (a seat freed with no heir)", ["by"],
                registry=REGISTRY)
RELAYS_MISSED = Counter("benchfarm_relays_missed_total", "Relays whose session did not take "
                        "the seat it was named (it connected after the release): the operator "
                        "wrote its go-ahead", registry=REGISTRY)
STALE_EVENTS = Counter("benchfarm_stale_run_events_total", "Watch events of a run from before "
                       "the operator's own later write of it, passed over (kopf's queue lagged "
                       "the API server)", registry=REGISTRY)
BOARDS = Gauge("benchfarm_boards", "Boards by state", ["state"], registry=REGISTRY)
UTILISATION = Gauge("benchfarm_board_utilisation_ratio",
                    "Share of online boards running a benchfarm run", registry=REGISTRY)
QUEUE_WAIT = Histogram("benchfarm_queue_wait_seconds", "From creation to board acquisition",
                       buckets=(1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 48 * 3600),
                       registry=REGISTRY)
INFRA_FAILURES = Counter("benchfarm_infra_failures_total", "Board sessions that handed their run "
                         "back for an infrastructure fault, by whose (party: board, lab, api, "
                         "store, coordinator)", ["party"], registry=REGISTRY)
for _party in Party:     # each from 0, so that the first fault of a party is an increase too
    INFRA_FAILURES.labels(_party.value)
BUGS = Counter("benchfarm_operator_bugs_total", "Unexpected errors caught where an operator "
               "thread must not die: bugs of benchfarm's (the log has each one's traceback), "
               "never an outage or a refusal, which are expected and handled", registry=REGISTRY)
FINISHED = Counter("benchfarm_runs_finished_total", "Finished runs", ["phase", "reason"],
                   registry=REGISTRY)
CAMPAIGNS_FINISHED = Counter("benchfarm_campaigns_finished_total", "Finished campaigns",
                             ["phase", "reason"], registry=REGISTRY)
CAMPAIGN_REGRESSIONS = Counter("benchfarm_campaign_regressions_total",
                               "Metrics a published campaign found regressed against the "
                               "previous release (per board column)", registry=REGISTRY)
LEASES_GRANTED = Counter("benchfarm_leases_granted_total", "BoardLeases granted a board",
                         registry=REGISTRY)
LEASES_ACTIVE = Gauge("benchfarm_leases_active", "BoardLeases holding a board now",
                      registry=REGISTRY)
LEASES_EXPIRED = Counter("benchfarm_leases_expired_total", "BoardLeases that ran to their expiry",
                         registry=REGISTRY)
LEASES_ENDED = Counter("benchfarm_leases_ended_total", "BoardLeases ended, by how (Expired, "
                       "Released, Deleted)", ["reason"], registry=REGISTRY)
INDEXED = Counter("benchfarm_results_indexed_total",
                  "Finished runs written to the results database", registry=REGISTRY)
CHANGE_POINTS = Counter("benchfarm_change_points_total",
                        "New regressions found in a metric's history (change points), by device "
                        "type and plan (which metric: the run's event and the dashboard)",
                        ["device_type", "plan"], registry=REGISTRY)
NOTIFICATIONS = Counter("benchfarm_notifications_total",
                        "Notification deliveries by what became of them: queued (in the outbox), "
                        "delivered, retried (an attempt failed), failed (given up) and refused "
                        "(over the namespace's maxDeliveriesPerHour)",
                        ["outcome"], registry=REGISTRY)
RECOVERY = Gauge("benchfarm_recovery_seconds",
                 "Reading the lab back after the operator started (runs, boards, fairness)",
                 registry=REGISTRY)
PLACES = Gauge("benchfarm_places_seconds", "The last read of the coordinator's places",
               registry=REGISTRY)
ROUNDS = Counter("benchfarm_schedule_rounds_total", "Scheduling rounds", registry=REGISTRY)
ROUND = Gauge("benchfarm_schedule_round_seconds",
              "Scheduling round (queue order, matching, assignment; on the owner thread) over the "
              "last 10,000 rounds (quantile 1: the longest since the start)", ["quantile"], registry=REGISTRY)
ROUND_CPU = Gauge("benchfarm_schedule_round_cpu_seconds",
                  "The scheduler thread's own CPU time in a round (the rest of a round's wall "
                  "time is waiting: for the GIL, a CPU)", ["quantile"], registry=REGISTRY)
OFF_OWNER_WRITES = Counter("benchfarm_off_owner_writes_total",
                           "Changes to the lab's records (runs, boards, leases, seats) made by a "
                           "thread other than their owner's (`operator.state.owner`): a bug, always 0",
                           ["record"], registry=REGISTRY)
OWNER_INBOX = Gauge("benchfarm_owner_inbox", "Messages waiting in the owner thread's inbox",
                    registry=REGISTRY)
_rounds: deque[tuple[float, float]] = deque(maxlen=10_000)
_rounds_lock = threading.Lock()
_count = [0, 0.0, 0.0]      # rounds seen, longest round since the start, and its most CPU


#: the reasons a run's end is counted by: the typed ones (`api.outcomes`)
_REASONS: frozenset[str] = frozenset({*Reason, *RunFailure, *Refusal, *BoardFaultKind})
OTHER = "Other"


def reason_label(reason: str) -> str:
    """A run's reason as a label value: one of the typed reasons, else `Other` (a session's
    word for a lab fault, or whatever someone wrote into a run's status)."""
    return reason if reason in _REASONS else OTHER


def party_label(party: str) -> str:
    """Whose fault, as a label value: one of `errors.Party` (else `lab`)."""
    return party if party in set(Party) else Party.lab.value


def bug(logger: logging.Logger, message: str, *args: object) -> None:
    """In an `except Exception` where a thread must survive (a scheduling round, a worker's
    loop, one campaign among many): what was caught is a bug, not an outage (those are caught
    by their class where they happen). Logged with its traceback and counted (the chart's
    BenchfarmOperatorBug alert)."""
    logger.exception(message, *args)
    BUGS.inc()


def serve(port: int, addr: str) -> int | None:
    """/metrics on `port` (none on 0: BENCHFARM_METRICS_PORT unset)."""
    if port:
        start_http_server(port, addr=addr, registry=REGISTRY)
        return port
    return None


def observe_lab(queued: int, running: int, standby: int = 0, oldest_wait: float = 0.0) -> None:
    QUEUE_DEPTH.set(queued)
    QUEUE_OLDEST.set(oldest_wait)
    RUNNING.set(running)
    STANDBY.set(standby)


def observe_boards(states: Mapping[str, int], running: int) -> None:
    """The boards by state (a count of each), and the share of those online a run holds."""
    for state in BoardState:
        BOARDS.labels(state.value).set(states.get(state.value, 0))
    online = sum(states.values()) - states.get(BoardState.offline.value, 0)
    UTILISATION.set(running / online if online else 0.0)


def observe_round(seconds: float, cpu_seconds: float, collected: bool = False) -> None:
    """One round's wall and thread CPU time, and whether a full collection landed in it; the
    quantiles of the last 10,000 are recomputed every 50 rounds (and for the first ones), the
    maxima every round."""
    ROUNDS.inc()
    if collected:
        ROUNDS_WITH_GC.inc()
    with _rounds_lock:
        _rounds.append((seconds, cpu_seconds))
        _count[0] += 1
        _count[1] = max(seconds, _count[1])
        _count[2] = max(cpu_seconds, _count[2])
        ROUND.labels("1").set(_count[1])
        ROUND_CPU.labels("1").set(_count[2])
        if _count[0] > 50 and _count[0] % 50:
            return
        walls = sorted(w for w, _ in _rounds)
        cpus = sorted(c for _, c in _rounds)
    for q in (0.5, 0.99):
        ROUND.labels(str(q)).set(walls[min(len(walls) - 1, int(q * len(walls)))])
        ROUND_CPU.labels(str(q)).set(cpus[min(len(cpus) - 1, int(q * len(cpus)))])


# -- the heap's full collections ------------------------------------------------------------------
GC_FULL = Counter("benchfarm_gc_full_collections_total",
                  "Python's full (generation 2) collections in the operator", registry=REGISTRY)
GC_FULL_LONGEST = Gauge("benchfarm_gc_full_longest_seconds",
                        "The longest full collection since the start", registry=REGISTRY)
ROUNDS_WITH_GC = Counter("benchfarm_schedule_rounds_with_full_collection_total",
                         "Scheduling rounds a full collection (any thread's) landed in",
                         registry=REGISTRY)
_gc = [0, 0.0, 0.0]         # full collections finished, start of the one running, longest


def _on_gc(phase: str, info: dict[str, int]) -> None:
    if info.get("generation") != 2:
        return
    now = time.perf_counter()
    if phase == "start":
        _gc[1] = now
        return
    _gc[0] += 1
    _gc[2] = max(_gc[2], now - _gc[1])
    GC_FULL.inc()
    GC_FULL_LONGEST.set(_gc[2])


def runqueue_wait() -> float:
    """Seconds this thread has waited, runnable, for a CPU (Linux's schedstat; 0 without it):
    of a slow round, the part the host's other processes took."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def rss_bytes() -> int:
    """The operator's resident memory now (/proc/self/statm; 0 where there is none)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def full_collections() -> int:
    """Full collections finished so far (a round compares it before and after)."""
    return int(_gc[0])


def watch_collections() -> None:
    if _on_gc not in gc.callbacks:
        gc.callbacks.append(_on_gc)
