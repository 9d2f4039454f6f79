"""A run's transitions, written: each move is checked against the lifecycle's table first
(`core.scheduling.lifecycle`: a move the table refuses is a bug, reported and not written; one
the run has outrun meanwhile is no longer due), checkpointed in the API (`core.scheduling.
transitions` builds the patch), and only then does the operator's registry take the new state
and act on it (on the owner's thread: `operator.state.owner`; the write itself is made on the
caller's). Finishing, re-queueing (with the board to avoid), retrying elsewhere after a fault,
cancelling a queued run, letting go of a deleted one's board, and the ends no run waits for (a
queue timeout, a finished run's TTL: `RunEnds`) are here, one place for the whole operator: the
supervisor, the seats and the scheduler call them (`Runtime.writes`).

`RunsRuntime` is what the runs room (these writes, the seats, the supervisor) needs of the
operator: the one Protocol between the room and the runtime, which it must not import.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, ParamSpec, Protocol

from benchfarm.api.outcomes import Phase, Reason, RunFailure, Underway, attempt_of
from benchfarm.core.scheduling import lifecycle, transitions
from benchfarm.core.scheduling.boardindex import could_ever_match
from benchfarm.core.scheduling.lifecycle import Move
from benchfarm.errors import RunError
from benchfarm.kubeapi.client import API_FAILURES, PreconditionFailed
from benchfarm.operator.launch.interface import Launcher
from benchfarm.operator.runs.admission import AdmissionRuntime, selector
from benchfarm.operator.state import metrics
from benchfarm.operator.state.pools import Workers
from benchfarm.operator.state.records import BoardRecord, RunState, ts

log = logging.getLogger("benchfarm")
P = ParamSpec("P")


class Sessions(Protocol):
    """What the writes and seats ask of the supervisor (`operator.runs.sessions.Supervisor`,
    above them in the room): a deleted run's session gone."""

    def wait_gone(self, run: RunState, timeout: float = 15.0) -> None: ...


class SeatQuestions(Protocol):
    """What the supervisor asks of the seats (`operator.runs.seating.Seats`, its sibling):
    whether a run is on standby."""

    def standing_by(self, r: RunState) -> bool: ...


class RunsRuntime(AdmissionRuntime, Protocol):
    """What the runs room needs of the operator's registry (`operator.runtime.Runtime` is one):
    what admission needs, its records, the room's own parts, the launcher and the round writes'
    thread."""

    @property
    def runs(self) -> dict[str, RunState]: ...

    @property
    def boards(self) -> dict[str, BoardRecord]: ...

    @property
    def sessions(self) -> Sessions: ...

    @property
    def seats(self) -> SeatQuestions: ...

    @property
    def writes(self) -> RunWrites: ...

    @property
    def writer(self) -> Workers: ...

    @property
    def launcher(self) -> Launcher: ...

    def active_runs(self) -> list[RunState]: ...

    def reindex(self, run: RunState) -> None: ...


class RunWrites:
    def __init__(self, rt: RunsRuntime) -> None:
        self.rt = rt

    def due(self, run: RunState, move: Move) -> bool:
        """Whether the lifecycle's table lets the operator make `move` on the run now: False
        when the run moved on since the move was decided (it is no longer due: logged), or when
        the table refuses the move (a bug: reported). Neither is written."""
        try:
            if lifecycle.check(move, run.phase, run.key):
                return True
        except lifecycle.RefusedMove:
            metrics.bug(log, "%s: the lifecycle refuses the move; not written", run.key)
            return False
        log.info("%s: %s no longer due (the run is %s by now); not written", run.key,
                 move.value, run.phase)
        return False

    def write(self, run: RunState, move: Move, status: dict[str, Any]) -> bool:
        """The move's patch, when it is due (`due`), checkpointed in the API first: only then
        may the scheduler act on the new state. False: not due, nothing written; a run deleted
        meanwhile is a RunError."""
        if not self.due(run, move):
            return False
        self._patch(run, status)
        return True

    def _patch(self, run: RunState, status: dict[str, Any]) -> None:
        written = self.rt.kube.patch_run_status(run.namespace, run.name, status)
        if not written:
            raise RunError("run deleted", reason=RunFailure.deleted)
        self.rt.owner.call(self._wrote, run, written, status)

    def _wrote(self, run: RunState, written: dict[str, Any], status: dict[str, Any]) -> None:
        run.wrote(written, status)
        self.rt.reindex(run)

    def finish(self, run: RunState, move: Move, reason: str, message: str) -> None:
        """The operator ends the run (`lifecycle.ENDS`: failed, or cancelled once its session
        is gone) in the phase the move leads to."""
        phase = lifecycle.MOVES_OF_A_RUN[move].to
        if move not in lifecycle.ENDS or phase is None:
            raise ValueError(f"{move.value} does not end a run")
        if not self.due(run, move):
            return
        metrics.FINISHED.labels(phase, metrics.reason_label(reason)).inc()
        try:
            self._patch(run, transitions.finished(run.status, run.generation, phase, reason,
                                                  message))
        except RunError:
            return
        self.rt.kube.event(run.ref(), "Normal" if phase == Phase.succeeded else "Warning", reason,
                        message)

    def requeue(self, run: RunState, message: str, avoid: str | None,
                busy_requeues: int | None = None) -> None:
        avoid_list = list(run.head.avoidBoards)
        if avoid and avoid not in avoid_list:
            avoid_list.append(avoid)
        try:
            if not self.write(run, Move.requeue, transitions.requeued(
                    run.status, run.generation, message, avoid_list, busy_requeues)):
                return
        except RunError:
            return
        self.rt.kube.event(run.ref(), "Normal", Underway.requeued, message)

    def retry_elsewhere(self, run: RunState, board: str, reason: str, message: str,
                        quarantined: bool, party: str = "board") -> None:
        """After a fault on `board` (whose: `party`), try another board or fail the run."""
        attempts = attempt_of(run.status, 1)
        avoid = set(run.head.avoidBoards) | {board}
        others = [b for b in self.rt.inventory.views() if b.name not in avoid]
        elsewhere = could_ever_match(selector(run.spec), others)
        if attempts <= self.rt.policy.maxInfraRetries and elsewhere:
            extra = f"; board {board} quarantined" if quarantined else ""
            self.requeue(run, f"{party} fault on {board} ({reason}: {message}){extra}; "
                              f"retrying on another board", avoid=board)
        else:
            why = "" if elsewhere else "; no other matching board to retry on"
            self.finish(run, Move.fail, reason, f"{party} fault on {board}: {message} "
                                           f"(after {attempts} attempt(s){why})")

    def cancel(self, key: str, *, deleting: bool = False) -> None:
        """Cancel a queued run here; a running one is stopped by its own runner, which watches
        its run. On delete, wait for the runner to let go of the board."""
        run = self.rt.owner.call(self._cancelling, key, deleting)
        if run is None:
            return
        if not deleting and lifecycle.allows(Move.cancel_queued, run.phase):
            status = transitions.cancelled_before_start(run.status, run.generation)
            try:
                written = self.rt.kube.guarded_status_write(run.namespace, run.name,
                                                         {"phase": Phase.pending}, status)
                if written:
                    self.rt.owner.call(self._wrote, run, written, status)
                    self.rt.kube.event(run.ref(), "Normal", Reason.cancelled,
                                    "cancelled before it started")
            except PreconditionFailed:
                log.info("%s started meanwhile; its session will see the cancel", key)
        elif run.phase == Phase.running and deleting:
            self.rt.sessions.wait_gone(run)
            self.rt.inventory.free(run.head.board, key)

    def _cancelling(self, key: str, deleting: bool) -> RunState | None:
        run = self.rt.runs.get(key)
        if run is not None and deleting:
            run.deleting = True
            self.rt.reindex(run)
        return run


class RunEnds:
    """The ends a round finds due and no run waits for: a waiting run past its queue timeout is
    failed, a finished run past its TTL deleted (after every round). Both are written on the
    writer thread, one run at a time: however many runs a tenant times out together, the
    owner's thread makes no API round trip for them. The record changes when the write comes
    back (`RunWrites._wrote`) or with the watch event; an outage leaves it to the next round."""

    def __init__(self, rt: RunsRuntime) -> None:
        self.rt = rt
        self.ending: set[str] = set()   # runs whose queue-timeout or TTL write is on its way

    def expire(self, waiting: list[RunState], now: float) -> None:
        for r in waiting:
            limit = r.spec.queueTimeoutSeconds
            if limit and now - r.created > limit and r.waiting:
                self._apart(r, self.rt.writes.finish, r, Move.queue_timeout,
                            RunFailure.queue_timeout,
                            f"no matching board became free within {limit} s")

    def ttl(self, runs: list[RunState], now: float) -> None:
        for r in runs:
            ttl = r.spec.ttlSecondsAfterFinished
            done = r.head.completionTime
            if ttl is None or not done or not lifecycle.allows(Move.ttl, r.phase):
                continue
            if r.completed_at is None or r.completed_at[0] != done:
                r.completed_at = (done, ts(done))     # parsed once, not every round
            if now - r.completed_at[1] >= ttl:
                self._apart(r, self.rt.kube.delete_run, r.namespace, r.name)

    def _apart(self, run: RunState, write: Callable[P, None], *args: P.args,
               **kwargs: P.kwargs) -> None:
        if run.key in self.ending:
            return
        self.ending.add(run.key)

        def end() -> None:
            try:
                write(*args, **kwargs)
            except API_FAILURES as exc:
                log.warning("%s: its end was not written (%s); again at the next round",
                            run.key, exc)
            finally:
                self.rt.owner.post(self.ending.discard, run.key)
        self.rt.writer.submit(end)
