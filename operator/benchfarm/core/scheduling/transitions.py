"""The operator's writes of a BenchmarkRun's status: one function per transition, each the status
patch it writes (a merge patch of `status`), built from the run's current status and generation.

One module, so what a transition writes is read in one place and unit-tested without an API
server: which fields it resets (a requeued run loses its board, its go-ahead and its session's
end; a launched one starts its resumes over), which conditions move, and how. Each patch goes
through the typed status (`api.runs.BenchmarkRunStatusPatch`): a misspelt or mistyped field
fails here. The operator (`operator.runtime`, `operator.runs.sessions`, `operator.runs.admission`) writes them; the
session's own writes are `session.status`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from benchfarm.api.outcomes import Condition, Phase, Reason, Underway
from benchfarm.api.runs import BenchmarkRunStatusPatch
from benchfarm.core.conditions import now_iso, set_condition

Status = Mapping[str, Any]
Patch = dict[str, Any]


def typed(fields: Mapping[str, Any]) -> Patch:
    """The patch as the typed status reads it: set fields only (a None clears a field). The
    operator's transitions below and the session's writes (`session.status`) go through it: a
    field `BenchmarkRunStatusPatch` does not have, or a value of the wrong type, is a
    ValidationError where it is written."""
    return BenchmarkRunStatusPatch.model_validate(dict(fields)).model_dump(mode="json",
                                                                            exclude_unset=True)


def _typed(**fields: Any) -> Patch:
    return typed(fields)


def _succeeded(status: Status, generation: int, value: str, reason: str, message: str,
               conditions: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    return set_condition(status.get("conditions") if conditions is None else conditions,
                         Condition.succeeded, value, reason, message, generation)


def admitted(status: Status, generation: int, *, plan_digest: str,
             resolved: list[dict[str, Any]], signature: str, prefix: str) -> Patch:
    """Admission took the run: in the queue with its suites resolved and signed (the session
    runs only what the operator's signature covers, `core.policy.trust`)."""
    return _typed(phase=Phase.pending, observedGeneration=generation, progress="queued",
                  planDigest=plan_digest, resolvedSuites=resolved,
                  resolvedSuitesSignature=signature,
                  storePrefix=prefix,   # for readers; the session computes it from spec and uid
                  conditions=_succeeded(status, generation, "Unknown", Underway.queued,
                                        "waiting for a matching board"))


def finished(status: Status, generation: int, phase: Phase, reason: str, message: str) -> Patch:
    """The run is over (`phase` Succeeded, Failed or Cancelled): refused at admission, failed by
    the operator, or cancelled before it started."""
    return _typed(phase=phase, completionTime=now_iso(), queuePosition=None,
                  observedGeneration=generation,
                  conditions=_succeeded(status, generation,
                                        "True" if phase == Phase.succeeded else "False", reason,
                                        message))


def cancelled_before_start(status: Status, generation: int) -> Patch:
    return finished(status, generation, Phase.cancelled, Reason.cancelled,
                    "cancelled before it started")


def launched(status: Status, generation: int, *, board: str, attempt: int,
             go_ahead: Mapping[str, Any] | None) -> Patch:
    """The run's session is launched on `board` for its `attempt`: seated (a go-ahead with no
    relay), on standby for a named seat (a relay), or on standby for any seat (None)."""
    seated = go_ahead is not None and go_ahead.get("after") is None
    scheduled = set_condition(status.get("conditions"), Condition.scheduled, "True",
                              Underway.board_assigned, f"running on {board}", generation)
    return _typed(phase=Phase.running, board=board, attempts=attempt, resumes=0,
                  queuePosition=None, sessionEnd=None, boardReleased=False, goAhead=go_ahead,
                  progress="starting the session" if seated else
                  "on standby: its session waits for a free session seat",
                  conditions=_succeeded(status, generation, "Unknown", Underway.booting,
                                        f"starting the session on {board}", scheduled))


def requeued(status: Status, generation: int, message: str, avoid: Iterable[str],
             busy_requeues: int | None = None) -> Patch:
    """Back in the queue (a fault not the run's, a board someone else held): its board, its
    go-ahead and its session's end are gone; `avoid`: the boards it must not get again;
    `busy_requeues`: how often someone else held its board (LabPolicy maxBusyRequeues)."""
    scheduled = set_condition(status.get("conditions"), Condition.scheduled, "False",
                              Underway.requeued, message, generation)
    counted = {} if busy_requeues is None else {"busyRequeues": busy_requeues}
    return _typed(**counted, phase=Phase.pending, board=None, progress="re-queued",
                  goAhead=None, avoidBoards=list(avoid), sessionEnd=None,
                  conditions=_succeeded(status, generation, "Unknown", Underway.queued, message,
                                        scheduled))


def queue_position(position: int | None) -> Patch:
    """Its place at the head of the queue (None: not among the first any more)."""
    return _typed(queuePosition=position)


def go_ahead(signed: Mapping[str, Any]) -> Patch:
    """A seat is free: the standby session may take its board (`api.grants.GoAhead`)."""
    return _typed(goAhead=signed, progress="a session seat is free: taking the board")


def relay(signed: Mapping[str, Any]) -> Patch:
    """A standby run is named the seat it takes (`api.grants.Relay`, inside its go-ahead)."""
    return _typed(goAhead=signed)


def resumed(resumes: int, limit: int, go_ahead: Mapping[str, Any] | None = None) -> Patch:
    """Its session stopped renewing its Lease and is launched again (`resumes` of `limit`);
    `go_ahead`: a plain one replacing a relay whose seat is the run's by now."""
    plain = {} if go_ahead is None else {"goAhead": go_ahead}
    return _typed(resumes=resumes, **plain, progress=f"session lost; resuming ({resumes}/{limit})")
