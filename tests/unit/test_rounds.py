"""A scheduling round's decisions (`core.scheduling.rounds.plan`), on plain records: who takes a free seat,
who is named whose seat, which runs are launched with a seat or on standby (and after whom),
which leases are granted, the namespace ceilings, and the relays taken and checked. The
operator applies a plan to its records and sends its writes (`operator.runtime`); none of that is
needed here."""

from __future__ import annotations

from dataclasses import dataclass

from benchfarm.api.grants import Relay
from benchfarm.core.scheduling import queue as q, rounds, seats
from benchfarm.core.scheduling.boardindex import BoardIndex, BoardView
from benchfarm.core.scheduling.fairness import RoundRobinFairness


@dataclass
class Run:
    key: str
    namespace: str = "team-a"
    board: str | None = None
    released: bool = False
    starting: bool = False
    granting: bool = False
    after: Relay | None = None
    seated_at: float = 0.0
    relayed_at: float | None = None
    relay_checked: bool = False
    standby: bool = False         # what `core.scheduling.seats.standing_by` says of it (asked apart)
    holds_place: bool = True      # the coordinator shows its place acquired by its session

    @property
    def seat(self) -> seats.Seat:
        return seats.Seat(at=self.seated_at, after=self.after, relayed_at=self.relayed_at,
                          relay_checked=self.relay_checked)


def relay_of(r: Run) -> Relay:
    return Relay(place=r.board or "", holder=f"benchfarm/run-{r.key}")


def entry(key: str, ns: str = "team-a", created: float = 0.0) -> q.QueueEntry:
    return q.QueueEntry(key, ns, 100, created, q.Selector.of("am62x"))


def boards(*names: str) -> BoardIndex:
    return BoardIndex(BoardView(n, "am62x") for n in names)


def plan(active=(), *, waiting=(), free=(), max_sessions=None, standby_max=0, leases_ns=(),
         seat_seconds=None, naming=(), launched=None, max_boards=1000, mono=100.0,
         positions_due=False, runs=None) -> rounds.RoundPlan[Run]:
    by_key = {r.key: r for r in active}
    by_key.update(runs or {})
    for e in waiting:
        if q.lease_of(e.key) is None:
            by_key.setdefault(e.key, Run(e.key, e.namespace))
    return rounds.plan(
        active, leases_ns=leases_ns, queue=q.WaitingQueue(waiting), free=boards(*free),
        max_sessions=max_sessions, standby_max=standby_max, seat_seconds=seat_seconds,
        naming=set(naming), launched=launched or {},
        standing_by=lambda r: (r.standby, r.after), holds_place=lambda r: r.holds_place,
        max_boards=lambda ns: max_boards, fairness=RoundRobinFairness(), now=1000.0,
        mono=mono, positions_due=positions_due, head=2, runs=by_key)


def test_without_a_session_limit_every_free_board_gets_a_run_with_a_seat():
    p = plan(waiting=[entry("team-a/r1", created=1), entry("team-a/r2", created=2)],
             free=["b1", "b2", "b3"])
    assert [(x.run.key, x.seated, x.heir) for x in p.launches] == \
        [("team-a/r1", True, None), ("team-a/r2", True, None)]
    assert sorted(x.board for x in p.launches) == ["b1", "b2"]
    assert p.grants == [] and p.go_aheads == [] and p.relays == []


def test_beyond_the_limit_runs_start_on_standby_named_the_seat_that_frees_first():
    old = Run("team-a/old", board="b1", seated_at=10.0)
    young = Run("team-a/young", board="b2", seated_at=90.0)
    p = plan([old, young], waiting=[entry("team-a/n1", created=1), entry("team-a/n2", created=2),
                                    entry("team-a/n3", created=3)],
             free=["b3", "b4", "b5"], max_sessions=2, standby_max=2)
    # no seat is free: two standby sessions (standby_max), each named a seat, the oldest first
    assert [(x.run.key, x.seated, x.heir.key if x.heir else None) for x in p.launches] == \
        [("team-a/n1", False, "team-a/old"), ("team-a/n2", False, "team-a/young")]


def test_a_seat_freed_goes_to_the_standby_run_waiting_longest_before_any_new_run():
    done = Run("team-a/done", board="b1", released=True, seated_at=40.0)
    s1 = Run("team-a/s1", board="b2", starting=False, standby=True)
    s2 = Run("team-a/s2", board="b3", standby=True)
    p = plan([done, s1, s2], waiting=[entry("team-a/new")], free=["b4"], max_sessions=1,
             standby_max=1, launched={"team-a/s1": 50.0, "team-a/s2": 20.0})
    assert [r.key for r in p.go_aheads] == ["team-a/s2"]       # launched first
    assert [r.key for r in p.standby] == ["team-a/s1"]
    # the seat's time is counted once, when its board is released
    assert p.seats_freed == [done] and p.seat_seconds == 100.0 - 40.0
    # no seat left, the standby slot taken by s1: the new run waits
    assert p.launches == []


def test_standby_runs_are_named_the_seats_no_relay_names_yet():
    a = Run("team-a/a", board="b1", seated_at=10.0)
    b = Run("team-a/b", board="b2", seated_at=20.0)
    named = Run("team-a/named", board="b3", standby=True, after=relay_of(a))
    fresh = Run("team-a/fresh", board="b4", standby=True)
    p = plan([a, b, named, fresh], max_sessions=2, standby_max=2)
    assert p.go_aheads == []
    assert [(r.key, heir.key) for r, heir in p.relays] == [("team-a/fresh", "team-a/b")]


def test_a_run_whose_relay_is_being_written_is_named_nothing_else_and_given_no_go_ahead():
    done = Run("team-a/done", board="b1", released=True)
    s = Run("team-a/s", board="b2", standby=True)
    p = plan([done, s], max_sessions=1, naming={"team-a/s"})
    assert p.go_aheads == [] and p.relays == []


def test_the_relay_a_status_holds_is_kept_where_it_changed():
    r = Run("team-a/r", board="b1", standby=True)
    held = Relay(place="b9", holder="benchfarm/run-x")
    got = rounds.plan(
        [r], leases_ns=(), queue=q.WaitingQueue(), free=boards(), max_sessions=1,
        standby_max=1, seat_seconds=None, naming=set(), launched={},
        standing_by=lambda run: (True, held), holds_place=lambda run: True,
        max_boards=lambda ns: 10, fairness=RoundRobinFairness(), now=0.0, mono=0.0,
        positions_due=False, head=2, runs={})
    assert got.afters == [(r, held)] and r.after is None       # the plan changes no record


def test_a_relays_seat_taken_is_noted_then_checked_after_the_grace():
    r = Run("team-a/r", board="b1", after=Relay(place="b0", holder="h"))
    assert plan([r], max_sessions=1).relays_taken == [r]
    r.relayed_at = 100.0 - seats.RELAY_GRACE / 2
    p = plan([r], max_sessions=1)
    assert p.relays_taken == [] and p.relay_checks == []
    r.relayed_at = 100.0 - seats.RELAY_GRACE
    assert plan([r], max_sessions=1).relay_checks == [r]
    r.relay_checked = True
    assert plan([r], max_sessions=1).relay_checks == []


def test_a_namespace_at_its_ceiling_waits_and_a_persons_lease_counts_against_it():
    running = Run("team-a/running", board="b1")
    p = plan([running], waiting=[entry("team-a/next"), entry("team-b/other", "team-b")],
             free=["b2", "b3"], max_boards=1)
    assert [x.run.key for x in p.launches] == ["team-b/other"]
    p = plan([], waiting=[entry("team-b/next", "team-b")], free=["b2"], max_boards=1,
             leases_ns=["team-b"])
    assert p.launches == []


def test_a_lease_in_the_queue_is_granted_not_launched():
    key = q.lease_key("team-a", "bring-up")
    p = plan(waiting=[entry(key)], free=["b1"], runs={})
    assert p.grants == [(key, "b1")] and p.launches == []


def test_nothing_can_start_the_queue_is_read_only_when_its_positions_are_due():
    waiting = [entry("team-a/r1", created=1), entry("team-a/r2", created=2),
               entry("team-a/r3", created=3)]
    assert plan(waiting=waiting).order is None
    p = plan(waiting=waiting, positions_due=True)
    assert [e.key for e in p.order or []] == ["team-a/r1", "team-a/r2"]
    assert p.launches == []
