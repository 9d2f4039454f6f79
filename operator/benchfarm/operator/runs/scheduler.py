"""The operator's scheduling iteration, the owner thread's own work (`operator.state.owner`): woken by a
change (a run, a board, a freed seat) or by a lease's due time, it refreshes the inventory, runs
a round, has the sessions supervised and tends the collector, one step after another.

A round asks `core.scheduling.rounds.plan` what it decides (go-aheads, relays, launches, lease grants),
applies the plan to the records at once (`apply`: what is on its way is marked, so the next
round does not decide it again) and sends the writes to the launch threads: the next round never
waits for an API round trip. Their answers come back to the owner's inbox. Queue positions,
queue timeouts and the TTL of finished runs (`operator.runs.writes.RunEnds`) are tended after
each round. After a (re)start `recover` reads everything back first; running sessions are adopted, not redone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any, Protocol

from benchfarm import cpu
from benchfarm.api.grants import Relay
from benchfarm.api.labpolicy import LabPolicySpec
from benchfarm.api.outcomes import Phase
from benchfarm.core.scheduling import lifecycle, queue as q, rounds, transitions
from benchfarm.core.scheduling.assignment import queue_positions
from benchfarm.core.scheduling.fairness import RoundRobinFairness
from benchfarm.core.scheduling.lifecycle import InFlight, Move
from benchfarm.kubeapi.client import API_FAILURES
from benchfarm.operator.launch.interface import LAUNCH_FAILURES
from benchfarm.operator.leases.keeper import Leases
from benchfarm.operator.notifications.notifier import Notifier
from benchfarm.operator.runs.fairness import FairnessBook
from benchfarm.operator.runs.seating import Seats
from benchfarm.operator.runs.sessions import Supervisor
from benchfarm.operator.runs.writes import RunEnds, RunsRuntime
from benchfarm.operator.state import metrics
from benchfarm.operator.state.collector import HeapTender
from benchfarm.operator.state.pools import Workers
from benchfarm.operator.state.records import RunIndex, RunState

log = logging.getLogger("benchfarm")

QUEUE_POSITION_LIMIT = 2     # only the head of the queue: the next two waiting runs
QUEUE_POSITION_WRITES = 2    # and at most two position writes per run (the write budget of a run)
QUEUE_POSITION_PERIOD = 5.0
BOARD_GAUGES_EVERY = 1.0     # seconds between two counts of the boards by state (metrics)
POLICY_NAME = "default"      # the one LabPolicy the lab has (CEL refuses any other name)
SLOW_ROUND = 0.05            # seconds: a round longer than this is logged (with what it waited for)
SLOW_ITERATION = 2.0         # seconds: a scheduler iteration longer than this is logged
IDLE_ITERATION = 2.0         # seconds: an iteration at least this often, woken or not


def _first_in_line(priority: int) -> None:
    """The scheduling thread's start: first in line for a CPU where asked and allowed."""
    if priority and not cpu.first_in_line(priority):
        log.info("the scheduling thread stays time-shared: this host does not let it take "
                 "real-time priority %d (BENCHFARM_SCHEDULER_RTPRIO)", priority)


class SchedulerRuntime(RunsRuntime, Protocol):
    """What the loop needs of the operator (`operator.runtime.Runtime` is one): what the whole
    room needs (`RunsRuntime`), and the parts and threads only the loop drives, by their own
    classes (the room's top: it imports them all)."""

    policy: LabPolicySpec       # read back at a start (`recover`)
    index: RunIndex
    leases: Leases
    sessions: Supervisor
    seats: Seats
    notifier: Notifier | None
    fairness: RoundRobinFairness
    fairness_book: FairnessBook
    heap: HeapTender
    launches: Workers           # launches, go-aheads, relays, lease grants
    max_sessions: int | None
    standby_max: int

    def observe_run(self, event_type: str | None, body: dict[str, Any]) -> None: ...


class Scheduler:
    def __init__(self, rt: SchedulerRuntime, rtprio: int = 0) -> None:
        self.rt = rt
        self.rtprio = rtprio
        self.ready = False           # `recover` done: the iterations may begin
        self.stopping = False        # the operator stops: no iteration starts any more
        self.woken = True
        self.next_at = 0.0           # monotonic: the next iteration, woken or not
        self.due_at = 0.0            # monotonic: the next iteration, as `due` last reckoned it
        self.ends = RunEnds(rt)
        self.positions: dict[str, int | None] = {}
        self.last_positions_at = 0.0
        self.boards_counted_at = 0.0
        self.supervising = threading.Lock()

    def start(self) -> None:
        """The owner's thread, first in line for a CPU where asked and allowed; `recover` is
        its first message."""
        self.rt.owner.start(self.tick, self.due, first=lambda: _first_in_line(self.rtprio))

    def wake(self) -> None:
        """From any thread: an iteration soon (on the owner's thread, after its inbox)."""
        if self.rt.owner.mine():
            self.woken = True
        else:
            self.rt.owner.post(self.wake)

    def due(self) -> float:
        """Seconds until the next iteration: none when woken; a lease's warning or end on time."""
        if self.woken:
            return 0.0
        wait = self.next_at - time.monotonic()
        if self.ready:
            lease = self.rt.leases.next_wake(time.time())
            if lease is not None:
                wait = min(wait, lease + 0.01)
        wait = max(0.0, min(IDLE_ITERATION, wait))
        self.due_at = time.monotonic() + wait
        return wait

    def tick(self) -> None:
        """Between two batches of the owner's inbox: an iteration when one is due (woken since,
        or the time `due` reckoned before the batch has come: the leases are not walked twice)."""
        if not self.ready or self.stopping or \
                (not self.woken and time.monotonic() < self.due_at):
            return
        self.woken = False
        self.next_at = time.monotonic() + IDLE_ITERATION
        t = [time.monotonic()]
        for step in (self.rt.inventory.refresh, self.round, self.supervise_soon,
                     self.rt.heap.tend):
            step()
            t.append(time.monotonic())
        if t[-1] - t[0] > SLOW_ITERATION:
            log.warning("a slow scheduler iteration: %.1f s (inventory %.1f, round %.1f, "
                        "heap %.1f)", t[4] - t[0], t[1] - t[0], t[2] - t[1], t[4] - t[3])

    def recover(self) -> None:
        """After a (re)start, on the owner's thread: read everything back; running sessions are
        adopted, not redone."""
        self.rt.store.ensure_bucket()
        self.rt.inventory.load()
        policy = self.rt.kube.get_cluster("labpolicies", POLICY_NAME)
        self.rt.policy = LabPolicySpec(**(policy or {}).get("spec") or {})
        self.rt.fairness_book.load()
        if self.rt.notifier is not None:     # before the runs: their events are matched to these
            self.rt.notifier.load()
        adopted = 0
        for body in self.rt.kube.list_runs_paged():
            self.rt.observe_run("ADDED", body)
            run = self.rt.runs.get(f"{body['metadata']['namespace']}/{body['metadata']['name']}")
            adopted += run is not None and run.phase == Phase.running   # as observe_run read it
        if adopted:
            log.info("adopted %d running session(s); their Leases say whether they live", adopted)
        self.rt.leases.recover()
        self.rt.inventory.refresh(force=True)
        self.ready = True

    def supervise_soon(self) -> None:
        """Session supervision (it lists the session Leases: an API round trip, seconds on a
        busy API server) on a launch thread, one at a time: the round a freed board wakes never
        waits behind it."""
        if not self.supervising.acquire(blocking=False):
            return

        def supervise() -> None:
            try:
                self.rt.sessions.supervise()
            except Exception:
                metrics.bug(log, "supervising the sessions failed; again at the next iteration")
            finally:
                self.supervising.release()
        self.rt.launches.submit(supervise)

    def round(self) -> None:
        """One round: `core.scheduling.rounds.plan` decides, `apply` changes the records at once; the
        writes the decisions need go to the launch threads."""
        now = time.time()
        t0, c0, g0 = time.perf_counter(), time.thread_time(), metrics.full_collections()
        q0 = metrics.runqueue_wait()
        positions_due = time.monotonic() - self.last_positions_at >= QUEUE_POSITION_PERIOD
        mono = time.monotonic()
        plan = rounds.plan(
            self.rt.index.active.values(),
            leases_ns=[held.namespace for held in self.rt.index.leases.values()],
            queue=self.rt.index.queue, free=self.rt.inventory.board_index(),
            max_sessions=self.rt.max_sessions, standby_max=self.rt.standby_max,
            seat_seconds=self.rt.seats.seat_seconds, naming=self.rt.seats.naming,
            launched=self.rt.sessions.launched, standing_by=self.rt.seats.seat_of,
            holds_place=self.rt.seats.holds_place,
            max_boards=lambda ns: self.rt.policy.for_namespace(ns).maxBoards,
            fairness=self.rt.fairness, now=now, mono=mono, positions_due=positions_due,
            head=QUEUE_POSITION_LIMIT, runs=self.rt.runs)
        named = self.apply(plan, mono)
        queue = self.rt.index.queue
        waiting, active, oldest = len(queue), len(self.rt.index.active), queue.oldest()
        timeouts = list(self.rt.index.queue_timeouts.values())
        ttl = list(self.rt.index.ttl.values())
        wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
        metrics.observe_round(wall, cpu, collected=metrics.full_collections() != g0)
        if wall > SLOW_ROUND:
            log.info("a slow round: %.0f ms (waiting for a CPU %.0f ms, its own CPU %.0f ms; "
                     "%d assignment(s))", wall * 1000, (metrics.runqueue_wait() - q0) * 1000,
                     cpu * 1000, len(plan.launches) + len(plan.grants))
        for run in plan.go_aheads:
            self.rt.launches.submit(self.rt.seats.go_ahead, run)
        for run in plan.relay_checks:
            self.rt.launches.submit(self.rt.seats.check_relay, run)
        for run, relay in named:
            self.rt.launches.submit(self.rt.seats.name_relay, run, relay)
        for launch in plan.launches:
            self.rt.launches.submit(self.launch, launch.run, launch.board)
        for key, board in plan.grants:
            self.rt.launches.submit(self.rt.leases.grant, self.rt.leases.leases[key], board)
        self.rt.fairness_book.save()
        metrics.observe_lab(waiting, active, standby=len(plan.standby),
                            oldest_wait=0.0 if oldest is None else max(0.0, now - oldest))
        # the boards by state, for the gauges a scrape reads: once a second, not after every
        # round of a flood (a walk of every board holds the GIL a round may wait for)
        if mono - self.boards_counted_at >= BOARD_GAUGES_EVERY:
            self.boards_counted_at = mono
            boards = list(self.rt.boards.values())      # one C call: whole, whatever adds one
            metrics.observe_boards(Counter(b.state for b in boards), active)
        self.ends.expire(timeouts, now)
        if positions_due and plan.order is not None:
            self.publish_positions(plan.order)
        self.rt.inventory.health.health_checks()
        self.rt.leases.tend(now)
        self.ends.ttl(ttl, now)

    def apply(self, plan: rounds.RoundPlan[RunState], mono: float) -> list[tuple[RunState, Relay]]:
        """A round's decisions, into the records: what is on its way is marked
        (`InFlight`, `naming`), so the next round does not decide it again before its write.
        Returns the relays named, for their writes."""
        for r, relay in plan.afters:
            r.seat = r.seat.named(relay)
        for r in plan.seats_freed:
            r.seat = r.seat.freed()
        self.rt.seats.seat_seconds = plan.seat_seconds
        for r in plan.relays_taken:
            r.seat = r.seat.relayed(mono)
        metrics.SEATS.labels("relay").inc(len(plan.relays_taken))
        for r in plan.relay_checks:
            r.seat = r.seat.checked()
        for r in plan.go_aheads:
            r.move(InFlight.go_ahead)
            r.seat = r.seat.granted(mono)
        metrics.SEATS.labels("go-ahead").inc(len(plan.go_aheads))
        named = []
        for r, heir in plan.relays:
            relay = self.rt.seats.relay_to(heir)
            r.seat = r.seat.named(relay)
            self.rt.seats.naming.add(r.key)      # no go-ahead meanwhile: it could land first
            named.append((r, relay))
        for launch in plan.launches:
            run = launch.run
            self.rt.boards[launch.board].run = run.key
            run.move(InFlight.launch_seated if launch.seated else InFlight.launch_standby)
            run.seat = run.seat.launched(
                mono, None if launch.heir is None else self.rt.seats.relay_to(launch.heir))
            self.rt.reindex(run)
        for key, board in plan.grants:
            self.rt.boards[board].run = key
            lease = self.rt.leases.leases[key]
            lease.starting = True
            self.rt.leases.reindex(lease)
        return named

    def launch(self, run: RunState, board: str) -> None:
        """One assignment's launch (its guarded Running write, the launcher, the Scheduled
        event: API round trips, a few hundred ms on a busy API server), on its own thread: the
        boards freed together start together, and the next round does not wait for them (the
        run counts as holding its board, or as on standby, while `starting`). Its outcome goes
        back to the owner."""
        try:
            self.rt.sessions.launch(run, board, seated=run.in_flight is InFlight.launch_seated,
                                 after=run.seat.after)
        except LAUNCH_FAILURES as exc:    # an outage, the run deleted: it waits again
            log.error("%s: launching its session failed: %s", run.key, exc)
            self.launch_failed(run, board)
        except Exception:                 # this thread's last handler
            metrics.bug(log, "%s: launching its session failed", run.key)
            self.launch_failed(run, board)

    def launch_failed(self, run: RunState, board: str) -> None:
        """The run waits again, its board free for the next round."""
        def failed() -> None:
            run.move(InFlight.none)
            self.rt.reindex(run)
            self.rt.inventory.free(board, run.key)
            self.rt.wake()
        self.rt.owner.call(failed)

    def publish_positions(self, order: list[q.QueueEntry]) -> None:
        self.last_positions_at = time.monotonic()
        new: dict[str, int | None] = {**queue_positions(order, QUEUE_POSITION_LIMIT)}
        for key in set(self.positions) | set(new):
            if self.positions.get(key) != new.get(key) and key in self.rt.runs:
                run = self.rt.runs[key]
                if run.phase == Phase.pending and not run.starting and \
                        run.position_writes < QUEUE_POSITION_WRITES:
                    run.position_writes += 1
                    self.rt.writer.submit(self.write_position, run, new.get(key))
        self.positions = new

    def write_position(self, run: RunState, position: int | None) -> None:
        """On the writer thread; not once the run has left the queue meanwhile."""
        if not lifecycle.allows(Move.position, run.phase) or run.starting:
            return
        try:
            self.rt.kube.patch_run_status(run.namespace, run.name,
                                       transitions.queue_position(position))
        except API_FAILURES as exc:  # a position is advice; the next one comes with the queue
            log.warning("%s: could not write its queue position: %s", run.key, exc)
