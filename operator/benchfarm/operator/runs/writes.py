"""A run's transitions, written: each is checkpointed in the API first (`core.scheduling.transitions`
builds the patch), and only then does the operator's registry take the new state and act on it
(on the owner's thread: `operator.state.owner`; the write itself is made on the caller's).
Finishing, re-queueing (with the board to avoid), retrying elsewhere after a fault, cancelling a
queued run and letting go of a deleted one's board are here, one place for the whole operator:
the supervisor, the seats and the scheduler call them (`Runtime.writes`).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from benchfarm.api.outcomes import Phase, Reason, RunFailure, Underway, attempt_of
from benchfarm.core.scheduling import transitions
from benchfarm.core.scheduling.boardindex import BoardView, could_ever_match
from benchfarm.errors import RunError
from benchfarm.kubeapi.client import PreconditionFailed
from benchfarm.operator.runs.admission import selector
from benchfarm.operator.state import metrics
from benchfarm.operator.state.records import Registry, RunState

log = logging.getLogger("benchfarm")


class WritesBoards(Protocol):
    def views(self) -> list[BoardView]: ...

    def free(self, board: str | None, key: str) -> None: ...


class WritesSessions(Protocol):
    def wait_gone(self, run: RunState, timeout: float = 15.0) -> None: ...


class WritesRuntime(Registry, Protocol):
    """What the transitions need of the operator's registry (`operator.runtime.Runtime` is one)."""

    @property
    def runs(self) -> dict[str, RunState]: ...

    @property
    def inventory(self) -> WritesBoards: ...

    @property
    def sessions(self) -> WritesSessions: ...

    def reindex(self, run: RunState) -> None: ...


class RunWrites:
    def __init__(self, rt: WritesRuntime) -> None:
        self.rt = rt

    def patch(self, run: RunState, status: dict[str, Any]) -> None:
        """Checkpoint in the API first; only then may the scheduler act on the new state."""
        written = self.rt.kube.patch_run_status(run.namespace, run.name, status)
        if not written:
            raise RunError("run deleted", reason=RunFailure.deleted)
        self.rt.owner.call(self._wrote, run, written, status)

    def _wrote(self, run: RunState, written: dict[str, Any], status: dict[str, Any]) -> None:
        run.wrote(written, status)
        self.rt.reindex(run)

    def finish(self, run: RunState, phase: Phase, reason: str, message: str) -> None:
        metrics.FINISHED.labels(phase, metrics.reason_label(reason)).inc()
        try:
            self.patch(run, transitions.finished(run.status, run.generation, phase, reason,
                                                 message))
        except RunError:
            return
        self.rt.kube.event(run.ref(), "Normal" if phase == Phase.succeeded else "Warning", reason,
                        message)

    def requeue(self, run: RunState, message: str, avoid: str | None,
                busy_requeues: int | None = None) -> None:
        avoid_list = list(run.status.get("avoidBoards") or [])
        if avoid and avoid not in avoid_list:
            avoid_list.append(avoid)
        try:
            self.patch(run, transitions.requeued(run.status, run.generation, message, avoid_list,
                                                 busy_requeues))
        except RunError:
            return
        self.rt.kube.event(run.ref(), "Normal", Underway.requeued, message)

    def retry_elsewhere(self, run: RunState, board: str, reason: str, message: str,
                        quarantined: bool, party: str = "board") -> None:
        """After a fault on `board` (whose: `party`), try another board or fail the run."""
        attempts = attempt_of(run.status, 1)
        avoid = set(run.status.get("avoidBoards") or []) | {board}
        others = [b for b in self.rt.inventory.views() if b.name not in avoid]
        elsewhere = could_ever_match(selector(run.spec), others)
        if attempts <= self.rt.policy.maxInfraRetries and elsewhere:
            extra = f"; board {board} quarantined" if quarantined else ""
            self.requeue(run, f"{party} fault on {board} ({reason}: {message}){extra}; "
                              f"retrying on another board", avoid=board)
        else:
            why = "" if elsewhere else "; no other matching board to retry on"
            self.finish(run, Phase.failed, reason, f"{party} fault on {board}: {message} "
                                             f"(after {attempts} attempt(s){why})")

    def cancel(self, key: str, *, deleting: bool = False) -> None:
        """Cancel a queued run here; a running one is stopped by its own runner, which watches
        its run. On delete, wait for the runner to let go of the board."""
        run = self.rt.owner.call(self._cancelling, key, deleting)
        if run is None:
            return
        if run.phase in (Phase.pending, None) and not deleting:
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
            self.rt.inventory.free(run.status.get("board"), key)

    def _cancelling(self, key: str, deleting: bool) -> RunState | None:
        run = self.rt.runs.get(key)
        if run is not None and deleting:
            run.deleting = True
            self.rt.reindex(run)
        return run
