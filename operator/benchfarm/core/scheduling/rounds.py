"""A scheduling round, decided: from what the operator knows now to the effects it carries out.

The operator (`operator.runtime`) hands `plan` its active runs (being launched, or Running), the
leases holding a board, the waiting queue, the free boards and its seat bookkeeping; `plan`
reads them and returns a `RoundPlan`: which standby sessions get a seat (go-aheads), which seat
each standby run is named (relays), which relays to check, which runs are launched (seated or on
standby, and after whom) and which leases are granted, and the queue's head for the positions.
It changes nothing it is given but the fairness policy's turn order (`core.scheduling.assignment.schedule`
serves a namespace) and the board index's free boards: the runtime applies the plan to its
records and sends the writes to other threads, so each decision is unit-tested on plain records
(tests/unit/test_rounds.py) apart from the threads that act on it.

Which runs hold a seat, and who is named whose, is `core.scheduling.seats`'s; who goes next in the queue is
`core.scheduling.assignment`'s. This module walks the active runs once and puts the two together.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from benchfarm.api.grants import Relay
from benchfarm.core.scheduling import queue as q, seats
from benchfarm.core.scheduling.assignment import schedule
from benchfarm.core.scheduling.boardindex import BoardIndex
from benchfarm.core.scheduling.fairness import FairnessPolicy


class RoundRun(seats.SeatRun, Protocol):
    """What a round reads of an active run (`operator.state.records.RunState` is one)."""

    @property
    def namespace(self) -> str: ...

    @property
    def board(self) -> str | None:
        """The board its status names."""

    @property
    def released(self) -> bool:
        """Its session released its board (it only uploads and reports now)."""



R = TypeVar("R", bound=RoundRun)


@dataclass(frozen=True)
class Launch(Generic[R]):
    """A run assigned a board: launched with a seat (`seated`) or on standby, named `heir`'s
    seat when there is one to name."""

    run: R
    board: str
    seated: bool
    heir: R | None


@dataclass
class RoundPlan(Generic[R]):
    afters: list[tuple[R, Relay | None]] = field(default_factory=list)
    """Runs whose relay (read from their status) differs from the one the operator keeps."""
    standby: list[R] = field(default_factory=list)
    """On standby after this round (its go-aheads taken out)."""
    seats_freed: list[R] = field(default_factory=list)
    """Released their board since the last round: their seat's time is counted, once."""
    seat_seconds: float | None = None
    """The running mean of a seat's time, those included."""
    relays_taken: list[R] = field(default_factory=list)
    """Took the seat a relay named (first seen this round)."""
    relay_checks: list[R] = field(default_factory=list)
    """Took it `seats.RELAY_GRACE` ago: whether their session saw it is checked."""
    go_aheads: list[R] = field(default_factory=list)
    relays: list[tuple[R, R]] = field(default_factory=list)
    """(standby run, the seated run whose seat it is named)."""
    launches: list[Launch[R]] = field(default_factory=list)
    grants: list[tuple[str, str]] = field(default_factory=list)
    """(lease key, board)."""
    order: list[q.QueueEntry] | None = None
    """The queue's head after the round (its positions), when it was read."""


def plan(active: Iterable[R], *, leases_ns: Iterable[str], queue: q.WaitingQueue,
         free: BoardIndex, max_sessions: int | None, standby_max: int,
         seat_seconds: float | None, naming: Collection[str], launched: Mapping[str, float],
         standing_by: Callable[[R], tuple[bool, Relay | None]],
         holds_place: Callable[[R], bool], max_boards: Callable[[str], int],
         fairness: FairnessPolicy, now: float, mono: float, positions_due: bool,
         head: int, runs: Mapping[str, R]) -> RoundPlan[R]:
    """One round's decisions. `standing_by`: a run's (standby, relay), `core.scheduling.seats.standing_by`
    asked with what the operator knows of it; `holds_place`: the coordinator showed its place
    acquired by its session; `max_boards`: a namespace's ceiling (LabPolicy); `runs`: the runs
    by key, for the queue's assignments (a lease's key is `core.scheduling.queue.lease_key`'s)."""
    p: RoundPlan[R] = RoundPlan(seat_seconds=seat_seconds)
    running_ns: dict[str, int] = {}
    holding = 0
    seated: list[R] = []       # holding a seat and their place: a relay's start
    after: dict[str, Relay | None] = {}
    for r in active:
        running_ns[r.namespace] = running_ns.get(r.namespace, 0) + 1
        standby, relay = standing_by(r)
        after[r.key] = relay
        if relay != r.seat.after:
            p.afters.append((r, relay))
        if standby:
            p.standby.append(r)
            continue
        # a session counts against the limit while it holds its board (after releasing it, it
        # only uploads and reports; the seat goes to the next run)
        holds = r.starting or not r.released
        holding += holds
        if not holds and r.seat.at:       # how long a seat is held (relays' aim)
            p.seat_seconds = seats.seat_mean(p.seat_seconds, mono - r.seat.at)
            p.seats_freed.append(r)
        if r.starting or r.granting or not holds or r.key in naming:
            continue
        if relay is not None:
            if r.seat.relayed_at is None:
                p.relays_taken.append(r)
            elif not r.seat.relay_checked and mono - r.seat.relayed_at >= seats.RELAY_GRACE:
                p.relay_checks.append(r)
        if holds_place(r):
            seated.append(r)
    for ns in leases_ns:           # a person's board counts as a run's
        running_ns[ns] = running_ns.get(ns, 0) + 1
    open_seats = None if max_sessions is None else max(0, max_sessions - holding)
    # the free seats go to the sessions on standby first
    p.go_aheads = seats.go_aheads(p.standby, open_seats, naming, launched, after)
    if open_seats is not None:
        open_seats -= len(p.go_aheads)
    given = {r.key for r in p.go_aheads}
    waiting = [r for r in p.standby if r.key not in given]
    # each standby run is named the seat that should free first (`api.grants.Relay`)
    named = {relay.place for r in p.standby if (relay := after[r.key]) is not None}
    heirs = [r for r in seated if r.board not in named]
    p.relays = seats.relays(waiting, heirs, p.seat_seconds, mono, after)
    # new sessions: those with a seat start at once, the others on standby
    room = None if open_seats is None else open_seats + max(0, standby_max - len(waiting))
    idle = len(free) > 0
    # nothing can start (no free board, no free session slot): read the queue's head only when
    # its positions are due, not every round of a flood
    if len(queue) and ((idle and room != 0) or positions_due):
        # the namespace's ceiling applies every round (priority is mutable)
        limits = {ns: max_boards(ns) for ns in queue.namespaces()}
        decision = schedule(queue, free, running_per_namespace=running_ns, max_boards=limits,
                              fairness=fairness, now=now,
                              max_assignments=room if idle else 0, head=head)
        p.order = decision.order
        for a in decision.assignments:
            if q.lease_of(a.run) is not None:      # a person's BoardLease
                p.grants.append((a.run, a.board))
                continue
            run = runs[a.run]
            seat = open_seats is None or open_seats > 0
            if open_seats:
                open_seats -= 1
            # on standby: it takes the seat that should free first
            heir = seats.take_heir(heirs, p.seat_seconds, mono) if heirs and not seat else None
            p.launches.append(Launch(run, a.board, seat, heir))
    p.standby = waiting
    return p
