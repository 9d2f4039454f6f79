"""Session seats as the operator keeps them: which seat a standby run is on, its relay named
and checked, its go-ahead written. What each decision is is `core.scheduling.seats`'s (and a round's,
`core.scheduling.rounds`'); this module answers them from the operator's records (`seat_of`) and writes what
was decided, on a launch thread (one status write each, checked against the lifecycle's table:
`RunWrites.write`), which hands what
it changes in the records to the owner thread (`operator.state.owner`).

`naming` holds the standby runs whose relay is on its way to the API server: no go-ahead is
written for them meanwhile (it could land first), and `seat_seconds` is the running mean of how
long a session holds its seat (`core.scheduling.seats.seat_mean`), which names each standby run the seat
that should free first.
"""

from __future__ import annotations

import logging

from benchfarm.api.grants import Relay
from benchfarm.api.outcomes import Phase, attempt_of
from benchfarm.api.places import run_holder
from benchfarm.core.policy import trust
from benchfarm.core.scheduling import seats, transitions
from benchfarm.core.scheduling.lifecycle import InFlight, Move
from benchfarm.errors import InfraError
from benchfarm.kubeapi.client import API_FAILURES
from benchfarm.operator.runs.writes import RunsRuntime
from benchfarm.operator.state import metrics
from benchfarm.operator.state.records import RunState

log = logging.getLogger("benchfarm")


class Seats:
    def __init__(self, rt: RunsRuntime) -> None:
        self.rt = rt
        self.naming: set[str] = set()     # standby runs whose relay is being written
        self.seat_seconds: float | None = None   # how long a session holds its seat (a mean)

    def seat_of(self, r: RunState) -> tuple[bool, Relay | None]:
        """Is the run on standby, and which relay names its seat (`core.scheduling.seats.standing_by`,
        on the owner's thread)?"""
        return seats.standing_by(
            r, naming=r.key in self.naming, holds_board=r.phase == Phase.running and not r.released,
            go_ahead=lambda: trust.read_go_ahead(self.rt.signing_key, r.uid, attempt_of(r.status),
                                                 r.head.goAhead),
            seat_held=self.seat_held)

    def standing_by(self, r: RunState) -> bool:
        """On standby (on the owner's thread)."""
        return self.seat_of(r)[0]

    def seat_held(self, relay: Relay) -> bool:
        """Does the run a relay names still hold its seat (its board not released, its run not
        over)? Once not, the seat is the standby run's, whether its session saw it or not."""
        rec = self.rt.boards.get(relay.place)
        holder = self.rt.runs.get(rec.run) if rec is not None and rec.run else None
        return holder is not None and holder.phase == Phase.running and \
            run_holder(holder.uid) == relay.holder and \
            not holder.head.boardReleased

    def holds_place(self, r: RunState) -> bool:
        """The coordinator showed the run's place acquired by its session (the last refresh): a
        relay may name it, the place's release is then that session's."""
        rec = self.rt.boards.get(r.head.board or "")
        return rec is not None and rec.holder == run_holder(r.uid)

    def relay_to(self, heir: RunState) -> Relay:
        return Relay(place=heir.status["board"], holder=run_holder(heir.uid))

    def check_relay(self, run: RunState) -> None:
        """A relay's seat went to this run `core.scheduling.seats.RELAY_GRACE` ago: if its session has not
        taken its place, it did not see the release (its connection came up after it), and it
        gets the plain go-ahead (one coordinator read, on a launch thread)."""
        place = run.head.board or ""
        try:
            if self.rt.coordinator.holder(place) == run_holder(run.uid):
                return
        except InfraError as exc:      # the coordinator is away: the go-ahead says it anyway
            log.info("%s: could not read who holds %s: %s", run.key, place, exc)
        def missed() -> Relay | None:
            """The relay it missed, its go-ahead on its way now; None if it needs none."""
            if run.seat.after is None or run.head.boardReleased or \
                    self.rt.runs.get(run.key) is not run or not run.move(InFlight.go_ahead):
                return None
            return run.seat.after
        relay = self.rt.owner.call(missed)
        if relay is None:
            return
        metrics.RELAYS_MISSED.inc()
        log.info("%s: its session did not take the seat %s gave up; writing its go-ahead",
                 run.key, relay.place)
        self.go_ahead(run)

    def name_relay(self, run: RunState, relay: Relay) -> None:
        """A standby run's relay, named in a round after its launch (one status write)."""
        try:
            if not self.rt.writes.write(run, Move.relay, transitions.relay(trust.sign_go_ahead(
                    self.rt.signing_key, run.uid, attempt_of(run.status), relay))):
                self.rt.owner.call(self._unnamed, run, relay)     # no longer due
        except API_FAILURES as exc:   # deleted meanwhile, or the API is away: the next round again
            log.info("%s: could not write its relay: %s", run.key, exc)
            self.rt.owner.call(self._unnamed, run, relay)
        finally:
            self.rt.owner.call(self.naming.discard, run.key)

    def _unnamed(self, run: RunState, relay: Relay) -> None:
        run.seat = run.seat.unnamed(relay)

    def go_ahead(self, run: RunState) -> None:
        """A seat is free: the standby run's session may take its board (one status write; the
        session's watch of its run brings it there)."""
        attempt = attempt_of(run.status)
        try:
            self.rt.writes.write(run, Move.go_ahead, transitions.go_ahead(
                trust.sign_go_ahead(self.rt.signing_key, run.uid, attempt)))
        except API_FAILURES as exc:   # deleted meanwhile, or the API is away: the next round again
            log.info("%s: could not write its go-ahead: %s", run.key, exc)
        finally:
            self.rt.owner.call(self._written, run)

    def _written(self, run: RunState) -> None:
        run.move(InFlight.none)
        self.rt.reindex(run)      # handed back meanwhile: in the queue from now
        self.rt.wake()
