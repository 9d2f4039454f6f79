"""A run's lifecycle as one table: its phases (`api.outcomes.Phase`, the API server's), every move
between them with who makes it, on what, and which `core.scheduling.transitions` function
writes its patch (`MOVES_OF_A_RUN`); and the operator's own decision on its way to the API
server (`InFlight`, with the moves `MOVES` allows). labgrid's strategies are the model: an enum
of states and the moves allowed between them, and a move not in the table is refused
(`check`), never written.

              admit               launch
    (new) ───────────> Pending ───────────> Running ─── go-ahead, relay, resume, hand-back ─┐
      │                 │  │  ^  position    │  │  ^                                       │
      │ refuse          │  │  └── requeue ───┘  │  └───────────────────────────────────────┘
      v                 │  │                    │  succeed, fail-own, cancel-own (its session)
    Failed              │  │ queue-timeout      │  fail, cancel-ended (the operator)
         cancel-queued  │  v                    v
             Cancelled    Failed            Succeeded | Failed | Cancelled ── ttl ──> (deleted)

Pure: the operator's writers (`operator.runs.writes.RunWrites`, `operator.runs.sessions`,
`operator.runs.seating`, `operator.runs.admission`, `operator.runs.scheduler`) check each move
here before they write it; the session's own moves (`Side.session`) are listed for the reader,
the session writes them (`session.status`). The run's session seat is a value with moves of its
own (`core.scheduling.seats.Seat`). Records hold all of it (`operator.state.records.RunState`);
the owner thread alone moves them (`operator.state.owner`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from benchfarm.api.outcomes import FINISHED, Phase


class Side(Enum):
    """Who writes a move: the operator (checked against the table before it writes) or the
    run's board session (`session.status`, listed here so the table is the whole lifecycle)."""

    operator = "operator"
    session = "session"


class Move(Enum):
    """Every move of a run's phase, named (`MOVES_OF_A_RUN` says from where, to what, by whom)."""

    admit = "admit"
    refuse = "refuse"
    launch = "launch"
    cancel_queued = "cancel-queued"
    queue_timeout = "queue-timeout"
    position = "position"
    go_ahead = "go-ahead"
    relay = "relay"
    resume = "resume"
    requeue = "requeue"
    fail = "fail"
    cancel_ended = "cancel-ended"
    ttl = "ttl"
    succeed = "succeed"
    fail_own = "fail-own"
    cancel_own = "cancel-own"
    hand_back = "hand-back"


NEW = None
"""A run's phase before admission wrote one (its status has none)."""
GONE = None
"""Where the TTL's move leads: the run is deleted (no phase: no run)."""


@dataclass(frozen=True)
class Step:
    """One row of the table: the move is allowed only `from_` these phases and leads `to` one
    (`to` None with `Move.ttl`: the run deleted); `writes`: the `core.scheduling.transitions`
    function that builds its patch (or the API call that makes it); `by`: the module that makes
    it; `on`: what triggers it; `overtaken`: the phases the run may have moved on to by someone
    else's move between the decision and its write (its session's end, a requeue): then the move
    is no longer due, and not written."""

    from_: frozenset[Phase | None]
    to: Phase | None
    writes: str
    by: str
    on: str
    side: Side = Side.operator
    overtaken: frozenset[Phase | None] = FINISHED


_running = frozenset({Phase.running})
_pending = frozenset({Phase.pending})
_launched = FINISHED | _running           # a waiting run's move, once it was launched or ended
_requeued = FINISHED | _pending           # a round's seat move, once its run was handed back

MOVES_OF_A_RUN: dict[Move, Step] = {
    Move.admit: Step(frozenset({NEW}), Phase.pending, "transitions.admitted",
                     "operator.runs.admission.admit",
                     "the run is created and admission takes it (kopf's create handler)",
                         overtaken=frozenset()),
    Move.refuse: Step(frozenset({NEW}), Phase.failed, "transitions.finished",
                      "operator.runs.admission.admit",
                      "the run is created and admission refuses it (a RunError's reason)",
                          overtaken=frozenset()),
    Move.launch: Step(_pending, Phase.running, "transitions.launched",
                      "operator.runs.sessions.Supervisor.launch",
                      "a round assigns it a board (`core.scheduling.rounds.Launch`): seated or "
                      "on standby; guarded in the API server on Pending", overtaken=_launched),
    Move.cancel_queued: Step(frozenset({Phase.pending, NEW}), Phase.cancelled,
                             "transitions.cancelled_before_start",
                             "operator.runs.writes.RunWrites.cancel",
                             "spec.cancel set while it waits; guarded on Pending",
                                 overtaken=_launched),
    Move.queue_timeout: Step(_pending, Phase.failed, "transitions.finished",
                             "operator.runs.writes.RunEnds.expire",
                             "after a round: waiting longer than spec.queueTimeoutSeconds",
                                 overtaken=_launched),
    Move.position: Step(_pending, Phase.pending, "transitions.queue_position",
                        "operator.runs.scheduler.Scheduler.write_position",
                        "a round's queue head moved (advice: skipped once it left the queue)",
                            overtaken=_launched),
    Move.go_ahead: Step(_running, Phase.running, "transitions.go_ahead",
                        "operator.runs.seating.Seats.go_ahead",
                        "a round gives a freed seat to a session on standby", overtaken=_requeued),
    Move.relay: Step(_running, Phase.running, "transitions.relay",
                     "operator.runs.seating.Seats.name_relay",
                     "a round names a standby run the seat that should free first",
                         overtaken=_requeued),
    Move.resume: Step(_running, Phase.running, "transitions.resumed",
                      "operator.runs.sessions.Supervisor",
                      "its session stopped renewing its Lease (at most MAX_RESUMES times)"),
    Move.requeue: Step(_running, Phase.pending, "transitions.requeued",
                       "operator.runs.writes.RunWrites.requeue",
                       "its session handed it back: someone else held the board (Busy), or a "
                       "fault not the run's with retries and another board left"),
    Move.fail: Step(_running, Phase.failed, "transitions.finished",
                    "operator.runs.writes.RunWrites.finish",
                    "handed back out of retries or boards, its board taken too often, or its "
                    "session dead past MAX_RESUMES"),
    Move.cancel_ended: Step(_running, Phase.cancelled, "transitions.finished",
                            "operator.runs.sessions.Supervisor",
                            "cancelled (or deleted) and its session is gone"),
    Move.ttl: Step(FINISHED, GONE, "Kube.delete_run", "operator.runs.writes.RunEnds.ttl",
                   "after a round: finished longer than spec.ttlSecondsAfterFinished ago",
                       overtaken=frozenset()),
    Move.succeed: Step(_running, Phase.succeeded, "session.status (finish)", "session.reporting",
                       "its suites ran and passed", Side.session),
    Move.fail_own: Step(_running, Phase.failed, "session.status (finish)", "session.runner",
                        "its suites failed, or its own input, software or time did",
                        Side.session),
    Move.cancel_own: Step(_running, Phase.cancelled, "session.status (finish)", "session.runner",
                          "spec.cancel seen by its session", Side.session),
    Move.hand_back: Step(_running, Phase.running, "session.status (sessionEnd)",
                         "session.runner",
                         "a fault not the run's, or a busy board: the operator decides next "
                         "(requeue, or fail)", Side.session),
}

ENDS = frozenset(m for m, step in MOVES_OF_A_RUN.items()
                 if step.side is Side.operator and step.to in FINISHED)
"""The operator's moves that end a run (`operator.runs.writes.RunWrites.finish` writes them)."""


class RefusedMove(Exception):
    """A move the table does not allow from the run's phase: a bug of the operator's (its
    decision does not fit the run it writes to). Not written; the writer reports it."""

    def __init__(self, move: Move, phase: str | None, key: str = "") -> None:
        step = MOVES_OF_A_RUN[move]
        allowed = ", ".join(sorted(p or "(none)" for p in step.from_))
        super().__init__(f"{key or 'a run'}: the move {move.value!r} is not allowed from phase "
                         f"{phase or '(none)'} (only from {allowed})")
        self.move = move
        self.phase = phase


def allows(move: Move, phase: str | None) -> bool:
    """Whether the table allows `move` from `phase` (a phase the run's status holds)."""
    return phase in MOVES_OF_A_RUN[move].from_


def check(move: Move, phase: str | None, key: str = "") -> bool:
    """True when the table allows the operator's `move` from `phase`; False when the run has
    moved on since the move was decided (`Step.overtaken`: no longer due, not written);
    `RefusedMove` otherwise. The session's moves are not the operator's to make."""
    step = MOVES_OF_A_RUN[move]
    if step.side is not Side.operator:
        raise ValueError(f"{move.value} is the session's move, not the operator's")
    if phase in step.from_:
        return True
    if phase in step.overtaken:
        return False
    raise RefusedMove(move, phase, key)


class InFlight(Enum):
    """The operator's own decision about a run that is on its way to the API server (a launch
    thread writes it), and what a round counts the run as meanwhile. One at a time: a decision
    is made only from `none` and goes back to `none` when its write landed or failed (`MOVES`);
    the run's watch events never change it."""

    none = "none"
    launch_seated = "launch-seated"     # its launch, with a session seat: a board and a seat
    launch_standby = "launch-standby"   # its launch on standby: a board, a seat to come
    go_ahead = "go-ahead"               # its standby session given a seat: the go-ahead's write


MOVES: dict[InFlight, frozenset[InFlight]] = {
    InFlight.none: frozenset({InFlight.launch_seated, InFlight.launch_standby, InFlight.go_ahead}),
    InFlight.launch_seated: frozenset({InFlight.none}),
    InFlight.launch_standby: frozenset({InFlight.none}),
    InFlight.go_ahead: frozenset({InFlight.none}),
}
"""The decisions' moves: each from `none`, each back to it (`RunState.move`)."""
