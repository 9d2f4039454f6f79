"""Session seats: which runs hold one, which wait on standby, and which seat each standby run is
named next. The operator's seat decisions, pure, so each is unit-tested apart from the threads
that act on them (`operator.runtime` reads the runs, asks here, and writes what was decided).

A lab may cap the sessions that hold a board at once (BENCHFARM_MAX_SESSIONS: a seat each).
Runs beyond the cap are launched on standby: the session gets ready (its Lease, its coordinator
connection, its software) and waits for a seat. A seat reaches it one of two ways
(`api.grants.GoAhead`):

- a **relay**: the run is named, ahead of time, the seat of a run that holds its place
  (`api.grants.Relay`); the standby session takes its board in the coordinator update that
  shows that place released, without waiting for the operator;
- a **go-ahead**: a seat that freed with no heir named goes to the standby run that has waited
  longest; the operator writes it and the session's watch brings it there.

A relay decided but not written yet (its run's launch, or its naming, still on its way to the
API server) names its seat as firmly as a written one: counted as free meanwhile, that seat went
to a second run too, and a full bench had 13-14 boards powered by 12 seats.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

from benchfarm.api.grants import GoAhead, Relay

RELAY_GRACE = 0.5    # seconds a relayed session has to take its place before the go-ahead is written
RELAY_LEAD = 2.0     # seconds, at least, before a named seat should free (the session's connection)
SEAT_EWMA = 0.1      # weight of the last seat's time in the running mean of a seat's time


@dataclass(frozen=True)
class Seat:
    """A run's session seat as the operator keeps it: when it got one, the relay it waits for on
    standby, and that relay's handover. A value: each move (below) returns the next one; the
    operator sets it on the run (`operator.runs.scheduler.Scheduler.apply` and `operator.runs.seating` alone)."""

    at: float = 0.0                  # monotonic: when it got its seat (relays name the oldest)
    after: Relay | None = None       # on standby: the seat it takes when its holder releases it
    relayed_at: float | None = None  # monotonic: when the operator saw that seat become its own
    relay_checked: bool = False      # whether its session was checked to have taken it

    def launched(self, mono: float, after: Relay | None) -> Seat:
        """Launched, with a seat or on standby (after `after`'s holder, if one is named)."""
        return Seat(at=mono, after=after)

    def named(self, relay: Relay | None) -> Seat:
        """On standby: the relay it waits for, named (or read back from its status)."""
        return replace(self, after=relay)

    def unnamed(self, relay: Relay) -> Seat:
        """The relay's write failed: named again by a later round."""
        return replace(self, after=None) if self.after == relay else self

    def relayed(self, mono: float) -> Seat:
        """The seat its relay names was released: its own from now."""
        return replace(self, at=mono, relayed_at=mono)

    def checked(self) -> Seat:
        """Its session was checked to have taken that seat (or given the go-ahead)."""
        return replace(self, relay_checked=True)

    def granted(self, mono: float) -> Seat:
        """A freed seat given by a go-ahead."""
        return replace(self, at=mono)

    def freed(self) -> Seat:
        """Its board released: its seat free for the next."""
        return replace(self, at=0.0)


class SeatRun(Protocol):
    """What the seat decisions read of a run (`operator.state.records.RunState` is one)."""

    @property
    def key(self) -> str: ...

    @property
    def starting(self) -> bool:
        """Its launch decided, its Running write not yet landed."""

    @property
    def granting(self) -> bool:
        """A seat given (with its launch, or by a go-ahead), its write not yet landed."""

    @property
    def seat(self) -> Seat:
        """Its seat: when it got it, the relay it waits for on standby, that relay's handover."""


Run = TypeVar("Run", bound=SeatRun)


def standing_by(r: SeatRun, *, naming: bool, holds_board: bool,
                go_ahead: Callable[[], GoAhead | None],
                seat_held: Callable[[Relay], bool]) -> tuple[bool, Relay | None]:
    """Is the run on standby (launched, its board kept for it, no seat yet), and which relay
    names its seat? `naming`: its relay's write is on its way; `holds_board`: Running with its
    board not released; `go_ahead`: reads the one its status holds (only when needed: it checks
    a signature); `seat_held`: does the run a relay names still hold that seat?

    Returns (standby, relay): the caller keeps the relay as the run's `after` (read back from
    the status of a run launched by an earlier operator too). A run of an operator from before
    go-aheads has none at all: standby, given one at once."""
    if r.granting:
        return False, r.seat.after
    if r.starting or naming:
        return r.seat.after is None or seat_held(r.seat.after), r.seat.after
    if not holds_board:
        return False, r.seat.after
    go = go_ahead()
    if go is None:
        return True, r.seat.after
    return go.after is not None and seat_held(go.after), go.after


def seat_mean(mean: float | None, held_for: float) -> float:
    """The running mean of how long a session holds its seat, after one more seat let go."""
    return held_for if mean is None else mean + SEAT_EWMA * (held_for - mean)


def take_heir(heirs: list[Run], seat_seconds: float | None, now: float) -> Run:
    """The seat a standby run is named, taken out of `heirs` (seated runs no relay names yet):
    the one that should free first, but not before its session is ready to see the release
    (RELAY_LEAD: a release before the standby session's coordinator connection is up goes
    unseen and waits for the go-ahead). The oldest seat while a seat's time is not known."""
    if seat_seconds is None:
        best = min(heirs, key=lambda r: r.seat.at)
    else:
        left = {r.key: r.seat.at + seat_seconds - now for r in heirs}
        late = [r for r in heirs if left[r.key] >= RELAY_LEAD]
        best = min(late, key=lambda r: left[r.key]) if late else \
            max(heirs, key=lambda r: left[r.key])
    heirs.remove(best)
    return best


def go_aheads(standby: Sequence[Run], seats: int | None, naming: Collection[str],
              launched: Mapping[str, float],
              after: Mapping[str, Relay | None] | None = None) -> list[Run]:
    """The standby runs the free seats go to now (`seats`: free seats, None for no cap): those
    whose launch and naming have landed; with fewer seats than runs, those named no seat of
    their own first (a named one gets its seat by its relay anyway), longest waiting first
    (`launched`: when each session was launched). `after`: each run's relay as this round
    read it (default: the run's own `after`)."""
    ready = [r for r in standby if not r.starting and r.key not in naming]
    if seats is not None and len(ready) > seats:
        ready.sort(key=lambda r: (_after(r, after) is not None, launched.get(r.key, 0.0)))
        ready = ready[:seats]
    return ready


def relays(standby: Sequence[Run], heirs: list[Run], seat_seconds: float | None,
           now: float, after: Mapping[str, Relay | None] | None = None) -> list[tuple[Run, Run]]:
    """(standby run, the seated run whose seat it is named) for every standby run named none
    yet and given no go-ahead, while a seated run is left to name (each seat is named once:
    `heirs` loses those it names). `after` as for `go_aheads`."""
    named: list[tuple[Run, Run]] = []
    for r in standby:
        if not heirs:
            break
        if _after(r, after) is None and not r.granting and not r.starting:
            named.append((r, take_heir(heirs, seat_seconds, now)))
    return named


def _after(r: SeatRun, after: Mapping[str, Relay | None] | None) -> Relay | None:
    return r.seat.after if after is None else after.get(r.key, r.seat.after)
