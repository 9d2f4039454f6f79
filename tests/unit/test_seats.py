"""The operator's seat decisions (`core.scheduling.seats`): which runs are on standby, which seat each is
named, who gets the free seats. A relay decided but not yet written names its seat like one its
run's status holds, so that seat never counts as free while the write is on its way (a full
bench had 13-14 boards powered by 12 seats: the seat a launching run was named went to another
run as well)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from benchfarm.api.grants import GoAhead, Relay
from benchfarm.core.scheduling import seats

RELAY = Relay(place="p0", holder="benchfarm/run-uid-h")


@dataclass
class Seat:
    key: str
    starting: bool = False
    granting: bool = False
    after: Relay | None = None
    seated_at: float = 0.0

    @property
    def seat(self) -> seats.Seat:
        return seats.Seat(at=self.seated_at, after=self.after)


def go(after: Relay | None = None) -> GoAhead:
    return GoAhead(attempt=1, after=after, signature="s")


def never() -> GoAhead | None:
    raise AssertionError("the go-ahead is read only for a run holding its board")


def standing_by(r: Seat, *, held: bool, naming: bool = False, holds_board: bool = True,
                go_ahead=never) -> tuple[bool, Relay | None]:
    return seats.standing_by(r, naming=naming, holds_board=holds_board, go_ahead=go_ahead,
                             seat_held=lambda relay: held)


def test_a_run_launched_on_standby_with_a_relay_takes_the_seat_when_its_holder_lets_go():
    for held in (True, False):
        r = Seat("t/r", starting=True, after=RELAY)   # its launch (the Running write) on its way
        assert standing_by(r, held=held) == (held, RELAY)
    r = Seat("t/r", starting=True)                      # on standby with no seat named: waits
    assert standing_by(r, held=False) == (True, None)


def test_a_relay_being_named_counts_like_a_written_one():
    for held in (True, False):
        r = Seat("t/r", after=RELAY)
        assert standing_by(r, held=held, naming=True) == (held, RELAY)   # its write on its way
        r.after = None                                    # written: its status holds it
        assert standing_by(r, held=held, go_ahead=lambda: go(RELAY)) == (held, RELAY)


def test_a_granted_seat_a_plain_go_ahead_and_a_released_board_are_never_standby():
    assert standing_by(Seat("t/r", granting=True), held=True) == (False, None)
    assert standing_by(Seat("t/r"), held=True, go_ahead=lambda: go()) == (False, None)
    assert standing_by(Seat("t/r", after=RELAY), held=True, holds_board=False) == (False, RELAY)
    # no go-ahead at all (or one not signed for this attempt): standby, its relay kept
    assert standing_by(Seat("t/r", after=RELAY), held=True, go_ahead=lambda: None) == \
        (True, RELAY)


def test_the_mean_seat_time_starts_at_the_first_seat_and_moves_a_tenth_of_the_way():
    assert seats.seat_mean(None, 30.0) == 30.0
    assert seats.seat_mean(30.0, 40.0) == pytest.approx(31.0)
    assert seats.seat_mean(30.0, 20.0) == pytest.approx(29.0)


def test_the_heir_is_the_oldest_seat_until_a_seats_time_is_known():
    heirs = [Seat("t/a", seated_at=5.0), Seat("t/b", seated_at=1.0), Seat("t/c", seated_at=3.0)]
    assert seats.take_heir(heirs, None, now=10.0).key == "t/b"
    assert [h.key for h in heirs] == ["t/a", "t/c"]          # each seat is named once


def test_the_heir_frees_first_but_not_before_the_standby_session_can_see_it():
    # seats held for 30 s on average; at 100 s: a frees in 1 s (too soon to be seen), b in 5 s,
    # c in 20 s: b is named
    heirs = [Seat("t/a", seated_at=71.0), Seat("t/b", seated_at=75.0), Seat("t/c", seated_at=90.0)]
    assert seats.take_heir(heirs, 30.0, now=100.0).key == "t/b"
    # all of them too soon: the latest of them, the one most likely still ahead
    heirs = [Seat("t/a", seated_at=70.5), Seat("t/b", seated_at=71.0)]
    assert seats.take_heir(heirs, 30.0, now=100.0).key == "t/b"


def test_free_seats_go_to_standby_runs_named_no_seat_first_longest_waiting_first():
    a, b = Seat("t/a", after=RELAY), Seat("t/b")
    c, d = Seat("t/c"), Seat("t/d", starting=True)          # d's launch is still on its way
    launched = {"t/a": 1.0, "t/b": 3.0, "t/c": 2.0}
    assert seats.go_aheads([a, b, c, d], None, set(), launched) == [a, b, c]
    assert seats.go_aheads([a, b, c, d], 2, set(), launched) == [c, b]
    assert seats.go_aheads([a, b, c, d], 2, {"t/c"}, launched) == [a, b]   # no one left out
    assert seats.go_aheads([a, b, c, d], 0, set(), launched) == []


def test_each_standby_run_named_no_seat_is_named_a_distinct_one_while_any_is_left():
    named = Seat("t/n", after=RELAY)
    granted = Seat("t/g", granting=True)
    s1, s2, s3 = Seat("t/s1"), Seat("t/s2"), Seat("t/s3")
    heirs = [Seat("t/h1", seated_at=2.0), Seat("t/h2", seated_at=1.0)]
    pairs = seats.relays([named, granted, s1, s2, s3], heirs, None, now=10.0)
    assert [(r.key, h.key) for r, h in pairs] == [("t/s1", "t/h2"), ("t/s2", "t/h1")]
    assert heirs == []                                      # s3 waits for a go-ahead


def test_a_seat_is_a_value_whose_moves_return_the_next():
    """The operator's seat bookkeeping (`core.scheduling.seats.Seat`): launched on standby after a relay,
    the relay's seat taken, its handover checked, the board released; a failed naming undone
    only for the relay that failed."""
    s = seats.Seat().launched(10.0, RELAY)
    assert (s.at, s.after, s.relayed_at, s.relay_checked) == (10.0, RELAY, None, False)
    taken = s.relayed(12.0)
    assert (taken.at, taken.relayed_at, taken.after) == (12.0, 12.0, RELAY) and s.at == 10.0
    assert taken.checked().relay_checked and not taken.relay_checked
    assert taken.freed().at == 0.0 and taken.freed().relayed_at == 12.0
    other = Relay(place="p9", holder="benchfarm/run-uid-x")
    assert s.unnamed(other) is s and s.unnamed(RELAY).after is None
    assert seats.Seat().named(RELAY).after == RELAY and seats.Seat().granted(5.0).at == 5.0
    assert seats.Seat(at=3.0, after=RELAY, relayed_at=4.0).launched(9.0, None) == seats.Seat(at=9.0)
