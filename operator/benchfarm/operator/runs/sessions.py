"""The operator's side of board sessions: launch them, watch them live, resume or end them.

A run goes Pending → Running in one guarded write (it must still be Pending: a cancel that lands
first wins), then a launcher starts its runner. From then on the operator only reads: the runner's
Lease says it is alive; `status.sessionEnd` says how it ended when it hands the run back (a board
fault, a busy board, a lab fault). A runner whose Lease stops moving is dead: it is launched again
(a resume: its checkpoints make it go on where it stopped), at most MAX_RESUMES times; whatever
its process still does, it is ended first (`Launcher.end`: its process group, or its Job).
After an operator restart nothing is relaunched blindly: live runners are simply adopted.

What the supervisor needs of the operator is the runs room's `operator.runs.writes.RunsRuntime`
(the registry's owner, its run transitions, the API, the coordinator, the policy, the launcher,
the inventory): it never imports the runtime. Each move it makes (launch, resume, requeue, fail,
cancel) is checked against the lifecycle's table (`core.scheduling.lifecycle`) before it is
written (`RunWrites.due`).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from benchfarm.api.grants import Relay
from benchfarm.api.outcomes import Condition, HandBack, Phase, Reason, SessionEnd, attempt_of
from benchfarm.api.places import run_holder
from benchfarm.core.policy.trust import has_go_ahead, read_go_ahead, sign_go_ahead
from benchfarm.core.scheduling import transitions
from benchfarm.core.scheduling.lifecycle import InFlight, Move
from benchfarm.errors import InfraError, Party
from benchfarm.kubeapi.client import API_FAILURES, PreconditionFailed
from benchfarm.kubeapi.leases import (
    SESSION_LEASE_LABEL,
    LeaseObserver,
    list_leases,
    session_lease_name,
)
from benchfarm.operator.launch.interface import LAUNCH_FAILURES, Launch
from benchfarm.operator.runs.writes import RunsRuntime
from benchfarm.operator.state import metrics
from benchfarm.operator.state.records import Owned, RunState, ts, written

log = logging.getLogger("benchfarm")

MAX_RESUMES = 3
STARTUP_GRACE = 45.0      # seconds a launched runner has to take its Lease
SUPERVISE_EVERY = 2.0


class Supervisor:
    def __init__(self, rt: RunsRuntime) -> None:
        self.rt = rt
        self.observer = LeaseObserver(grace=5.0)
        # run key -> monotonic time of the last launch (the owner's: `operator.state.owner`)
        self.launched: Owned[str, float] = Owned("seat")
        self.last = 0.0
        self.clock = time.monotonic
        self.launching = threading.Lock()   # launches run on several threads; a launcher on one

    # -- launch -------------------------------------------------------------------------------
    def launch(self, run: RunState, board: str, *, seated: bool,
               after: Relay | None = None) -> None:
        """`seated`: the run has a session seat, and its Running status carries the signed
        go-ahead of this attempt (`api.grants.GoAhead`); else its session starts on standby
        and waits for one: `after` that seat's holder releases its place, if one is named."""
        rt = self.rt
        attempt = attempt_of(run.status) + 1
        go_ahead = sign_go_ahead(rt.signing_key, run.uid, attempt) if seated else \
            None if after is None else sign_go_ahead(rt.signing_key, run.uid, attempt, after)
        status = transitions.launched(run.status, run.generation, board=board, attempt=attempt,
                                      go_ahead=go_ahead)
        if not rt.writes.due(run, Move.launch):
            rt.owner.call(self._launched, run, board, None, status)
            return
        try:
            written = rt.kube.guarded_status_write(run.namespace, run.name,
                                                   {"phase": Phase.pending}, status)
        except PreconditionFailed:
            written = None
            log.info("%s changed while being scheduled (cancelled?); not launching", run.key)
        rt.owner.call(self._launched, run, board, written, status)
        if not written:
            return
        metrics.QUEUE_WAIT.observe(max(0.0, time.time() - run.created))
        handle = self._launch(run, attempt, 0)
        rt.kube.event(run.ref(), "Normal", Condition.scheduled,
                      f"board {board} assigned; session {handle}")

    def _launched(self, run: RunState, board: str, written: dict[str, Any] | None,
                  status: dict[str, Any]) -> None:
        """The launch's Running write landed (`written`) or did not (its board free again)."""
        run.move(InFlight.none)
        if written:
            run.wrote(written, status)
            self.launched[run.key] = self.clock()
        self.rt.reindex(run)
        if not written:
            self.rt.inventory.free(board, run.key)

    def _launch(self, run: RunState, attempt: int, resume: int) -> str:
        """Ask the launcher for a runner; a launcher that fails is a lab fault, seen as a dead
        session (no Lease) and resumed like one, at most MAX_RESUMES times."""
        started = run.head.startTime
        # on standby, its session may wait up to the run's timeout for a seat, then has all of it
        left = ts(started) + run.spec.timeoutSeconds - time.time() if started else \
            float(run.spec.timeoutSeconds) * (1 if has_go_ahead(
                self.rt.signing_key, run.uid, attempt, run.head.goAhead) else 2)
        board = run.head.board or ""
        req = Launch(run.namespace, run.name, run.uid, attempt, resume, deadline_s=max(left, 10.0),
                     reads=(run.spec.baseline,) if run.spec.baseline else (),
                     board=board, place=self._handover(board))
        try:
            with self.launching:
                return self.rt.launcher.launch(req)
        except LAUNCH_FAILURES as exc:
            log.error("%s: the launcher could not start the session: %s", run.key, exc)
            self.rt.kube.event(run.ref(), "Warning", "LaunchFailed",
                               f"the session could not be started (a lab fault): {exc}")
            return f"not started ({exc})"

    def _handover(self, board: str) -> str:
        """The board's place as the operator knows it, for the session to start from; without
        it (the coordinator is away) the session reads the whole lab itself."""
        try:
            place = self.rt.coordinator.handover(board) if board else None
        except InfraError as exc:  # an outage: the session waits it out on its own
            log.info("cannot hand the place of %s to its session: %s", board, exc)
            return ""
        return place.to_setting() if place is not None else ""

    # -- supervision --------------------------------------------------------------------------
    def supervise(self, force: bool = False) -> None:
        if not force and self.clock() - self.last < SUPERVISE_EVERY:
            return
        self.last = self.clock()
        rt = self.rt
        with self.launching:
            rt.launcher.reap()
        try:
            self.observer.observe(list_leases(rt.kube, f"{SESSION_LEASE_LABEL}=true"),
                                  now=self.clock())
        except API_FAILURES as exc:  # our own view of the API is gone: judge nobody dead
            log.warning("cannot list session Leases (%s); not judging sessions", exc)
            self.observer.forget()
            return
        now = self.clock()
        running = [r for r in rt.active_runs() if r.phase == Phase.running and not r.starting]
        for run in running:
            end = written(SessionEnd, run.status, "sessionEnd")
            if end is not None and end.attempt == attempt_of(run.status):
                self._ended(run, end)
                continue
            if self.observer.alive(f"{run.namespace}/{session_lease_name(run.name)}", now):
                continue
            launched = self.launched.get(run.key)
            if launched is None:         # adopted: give it a grace period
                launched = now
                rt.owner.call(self.launched.setdefault, run.key, now)
            if now - launched < STARTUP_GRACE:
                continue
            self._dead(run)

    def _dead(self, run: RunState) -> None:
        rt = self.rt
        board = run.head.board
        self._end(run)       # whatever its process still does, it is not left beside another
        if run.spec.cancel or run.deleting:
            self._release(board, run.uid)
            if not run.deleting:
                rt.writes.finish(run, Move.cancel_ended, Reason.cancelled, "cancelled (its session had ended)")
            rt.inventory.free(board, run.key)
            return
        resumes = int(run.head.resumes or 0) + 1
        if resumes > MAX_RESUMES:
            self._release(board, run.uid)
            rt.writes.finish(run, Move.fail, Reason.too_many_resumes,
                      f"the session on {board} died {resumes} times (no Lease renewal for "
                      f"{self.observer.grace + 15:.0f} s each time); giving up after "
                      f"{MAX_RESUMES} resumes. See the session logs.")
            rt.inventory.free(board, run.key)
            return
        log.warning("%s: the session on %s stopped renewing its Lease; resuming it (%d/%d)",
                    run.key, board, resumes, MAX_RESUMES)
        attempt = attempt_of(run.status, 1)
        plain = None
        # a relay whose seat is its own by now: the resumed session gets the plain go-ahead, it
        # would wait for a release it can no longer see
        go = read_go_ahead(rt.signing_key, run.uid, attempt, run.head.goAhead)
        if go is not None and go.after is not None and \
                not rt.owner.call(rt.seats.standing_by, run):
            plain = sign_go_ahead(rt.signing_key, run.uid, attempt)
        try:
            if not rt.writes.write(run, Move.resume, transitions.resumed(resumes, MAX_RESUMES,
                                                                         plain)):
                return
        except API_FAILURES as exc:
            log.warning("%s: could not record the resume (%s); will retry", run.key, exc)
            return
        rt.owner.call(self.launched.__setitem__, run.key, self.clock())
        handle = self._launch(run, attempt, resumes)
        rt.kube.event(run.ref(), "Warning", "SessionResumed",
                      f"the session stopped renewing its Lease; resumed from its checkpoints "
                      f"({resumes}/{MAX_RESUMES}): {handle}")

    def _end(self, run: RunState) -> None:
        """End the session given up on: its Lease stopped, but its process may live on (stalled,
        or cut off from the API server); it is ended before any other is launched."""
        req = Launch(run.namespace, run.name, run.uid, attempt_of(run.status, 1),
                     int(run.head.resumes or 0), board=run.head.board or "")
        try:
            with self.launching:
                what = self.rt.launcher.end(req)
        except LAUNCH_FAILURES as exc:
            log.warning("%s: could not end its session: %s", run.key, exc)
            return
        log.info("%s: the session given up on: %s", run.key, what)

    def _ended(self, run: RunState, end: SessionEnd) -> None:
        """A runner handed the run back: charge the board only for a board fault."""
        rt = self.rt
        board = run.head.board or ""
        self._release(board, run.uid)
        rt.owner.call(self.launched.pop, run.key, None)
        if end.outcome == HandBack.busy:
            rt.inventory.held(board, end.message)
            taken = int(run.head.busyRequeues or 0) + 1
            if taken > rt.policy.maxBusyRequeues:
                rt.writes.finish(run, Move.fail, Reason.board_taken,
                          f"the board was taken by someone else {taken} times (last {board}: "
                          f"{end.message}); giving up after {rt.policy.maxBusyRequeues} "
                          f"re-queues (LabPolicy maxBusyRequeues)")
            else:
                rt.writes.requeue(run, f"board {board} was taken by someone else: {end.message}",
                           avoid=None, busy_requeues=taken)
        elif end.outcome == HandBack.board_fault:
            metrics.INFRA_FAILURES.labels(Party.board).inc()
            quarantined = rt.inventory.health.board_failed(board, InfraError(end.message,
                                                                      reason=end.reason))
            rt.writes.retry_elsewhere(run, board, end.reason, end.message, quarantined, Party.board)
        else:  # a lab fault (PDU, exporter): not the board's, but try another one
            party = end.party or Party.lab
            metrics.INFRA_FAILURES.labels(metrics.party_label(party)).inc()
            rt.writes.retry_elsewhere(run, board, end.reason, end.message, False, party)
        rt.inventory.free(board, run.key)

    def _release(self, board: str | None, uid: str) -> None:
        """Free a place a runner of this run may have left acquired (it died or was fenced)."""
        if not board:
            return
        try:
            if self.rt.coordinator.release(board, holder=run_holder(uid)):
                log.info("released %s, left acquired by the session of run uid %s", board, uid)
        except InfraError as exc:
            log.warning("could not release %s for run uid %s: %s", board, uid, exc)

    def wait_gone(self, run: RunState, timeout: float = 15.0) -> None:
        """On delete: give the runner time to power off and release; then free what it left."""
        deadline = self.clock() + timeout
        key = f"{run.namespace}/{session_lease_name(run.name)}"
        while self.clock() < deadline:
            try:
                leases = list_leases(self.rt.kube, f"{SESSION_LEASE_LABEL}=true")
            except API_FAILURES:
                break
            if not any(lease.metadata is not None and lease.spec is not None and
                       f"{lease.metadata.namespace}/{lease.metadata.name}" == key and
                       lease.spec.holder_identity for lease in leases):
                break
            time.sleep(0.5)
        self._release(run.head.board, run.uid)
        self.rt.owner.call(self.launched.pop, run.key, None)
