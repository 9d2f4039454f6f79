"""The operator's decisions about sessions, with fakes around it: resume a dead session at most
three times, charge a board only for a board fault, adopt live sessions after a restart."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from benchfarm.api.labpolicy import LabPolicySpec
from benchfarm.api.runs import BenchmarkRunSpec
from benchfarm.core.scheduling import lifecycle
from benchfarm.errors import Party
from benchfarm.operator.runs import sessions
from benchfarm.operator.state import metrics
from benchfarm.operator.state.owner import Owner
from benchfarm.operator.state.records import RunState


class FakeRuntime:
    def __init__(self) -> None:
        self.owner = Owner()             # not started: its calls run on the caller's thread
        self.runs: dict[str, RunState] = {}
        self.launched: list[tuple] = []
        self.finished: list[tuple] = []
        self.requeued: list[tuple] = []
        self.retried: list[tuple] = []
        self.charged: list[str] = []
        self.released: list[tuple] = []
        rt = self
        self.ended: list = []
        self.launcher = SimpleNamespace(launch=lambda req: rt.launched.append(req) or "pid 1",
                                        reap=lambda: None,
                                        end=lambda req: rt.ended.append(req) or "ended")
        self.kube = SimpleNamespace(event=lambda *a: None)
        self.policy = LabPolicySpec(maxBusyRequeues=2)
        self.signing_key = b"k" * 32
        self.on_standby: set[str] = set()
        self.coordinator = SimpleNamespace(
            release=lambda board, holder: rt.released.append((board, holder)) or True,
            handover=lambda board: None)       # the session reads the lab itself
        self.inventory = SimpleNamespace(
            free=lambda board, key: None, held=lambda board, by: None,
            health=SimpleNamespace(board_failed=lambda board, exc: rt.charged.append(board) or False))
        self.writes = self.seats = self     # the transitions and the seat questions: here too

    def active_runs(self):
        return [r for r in self.runs.values() if r.active]

    def reindex(self, run):
        pass

    def standing_by(self, run):
        return run.key in self.on_standby

    def due(self, run, move):
        return lifecycle.check(move, run.phase, run.key)

    def write(self, run, move, status):
        if not self.due(run, move):
            return False
        run.status = {**run.status, **status}   # replaced, as the runtime does
        return True

    def finish(self, run, move, reason, message):
        phase = lifecycle.MOVES_OF_A_RUN[move].to
        run.status = {**run.status, "phase": phase}
        self.finished.append((run.key, phase, reason))

    def requeue(self, run, message, avoid, busy_requeues=None):
        if busy_requeues is not None:
            run.status = {**run.status, "busyRequeues": busy_requeues}
        self.requeued.append((run.key, avoid))

    def retry_elsewhere(self, run, board, reason, message, quarantined, party):
        self.retried.append((run.key, board, reason, party))


def running(name="r", **status):
    spec = BenchmarkRunSpec(selector={"deviceType": "qemu-x86"}, plan="demo")
    return RunState("default", name, f"uid-{name}", 1, 0.0, spec,
                    {"phase": "Running", "board": "vb-x86-0", "attempts": 1, **status})


@pytest.fixture
def sup(monkeypatch):
    leases: list = []
    monkeypatch.setattr(sessions, "list_leases", lambda kube, selector: leases)
    rt = FakeRuntime()
    s = sessions.Supervisor(rt)
    s.leases = leases
    return s


def tick(sup, now):
    sup.clock = lambda: now
    sup.supervise(force=True)


def test_a_dead_session_is_resumed_three_times_then_the_run_fails(sup):
    run = running()
    sup.rt.runs[run.key] = run
    now = 1000.0
    for expected in (1, 2, 3):
        sup.launched[run.key] = now - sessions.STARTUP_GRACE - 1   # launched long ago, no Lease
        tick(sup, now)
        assert run.status["resumes"] == expected
        assert sup.rt.launched[-1].resume == expected              # relaunched as resume N
        now += 100
    sup.launched[run.key] = now - sessions.STARTUP_GRACE - 1
    tick(sup, now)
    assert sup.rt.finished == [("default/r", "Failed", "TooManyResumes")]
    assert sup.rt.released == [("vb-x86-0", "benchfarm/run-uid-r")]
    assert sup.rt.charged == []                                    # not the board's fault
    # each session given up on was ended before the next was launched, the last one too
    assert [(r.uid, r.resume) for r in sup.rt.ended] == [("uid-r", n) for n in (0, 1, 2, 3)]


def test_a_resumed_session_whose_relay_seat_is_its_own_gets_the_plain_go_ahead(sup):
    """A standby session named a relay (`api.grants.Relay`) died. If the seat it waited for is
    its own by now, the session resumed in its place would wait for a release it can no longer
    see: its resume carries the plain go-ahead. If the seat is still held, it keeps the relay."""
    from benchfarm.api.grants import GO_AHEAD_FIELD, Relay
    from benchfarm.core.policy import trust
    key = sup.rt.signing_key
    after = Relay(place="vb-x86-1", holder="benchfarm/run-uid-h")
    given = running("given", goAhead=trust.sign_go_ahead(key, "uid-given", 1, after))
    held = running("held", goAhead=trust.sign_go_ahead(key, "uid-held", 1, after))
    plain = trust.sign_go_ahead(key, "uid-seated", 1)
    seated = running("seated", goAhead=plain)
    sup.rt.on_standby.add(held.key)
    writes: dict[str, dict] = {}
    write = sup.rt.write
    sup.rt.write = lambda run, move, status: (writes.setdefault(run.key, status) and
                                              write(run, move, status))
    for run in (given, held, seated):
        sup.rt.runs[run.key] = run
        sup.launched[run.key] = 1000.0 - sessions.STARTUP_GRACE - 1
    tick(sup, 1000.0)
    assert given.status["resumes"] == 1 and held.status["resumes"] == 1
    assert trust.has_go_ahead(key, "uid-given", 1, given.status[GO_AHEAD_FIELD])
    kept = trust.read_go_ahead(key, "uid-held", 1, held.status[GO_AHEAD_FIELD])
    assert kept is not None and kept.after == after
    assert GO_AHEAD_FIELD in writes[given.key] and GO_AHEAD_FIELD not in writes[held.key]
    assert GO_AHEAD_FIELD not in writes[seated.key]    # its plain go-ahead stands: not rewritten
    assert seated.status[GO_AHEAD_FIELD] == plain


def test_a_live_session_is_left_alone_and_an_adopted_one_gets_a_grace_period(sup):
    run = running()
    sup.rt.runs[run.key] = run
    sup.leases.append(SimpleNamespace(
        metadata=SimpleNamespace(name="benchfarm-run-r", namespace="default"),
        spec=SimpleNamespace(renew_time=datetime.now(UTC), acquire_time=None,
                             holder_identity="host/42", lease_duration_seconds=15)))
    tick(sup, 10.0)
    assert sup.rt.launched == []
    sup.leases.clear()                     # no Lease, but we never launched it: adopted
    sup.launched.clear()
    tick(sup, 20.0)
    assert sup.rt.launched == [] and sup.launched[run.key] == 20.0


@pytest.mark.parametrize("outcome,party,charged,retried,requeued", [
    ("BoardFault", "board", ["vb-x86-0"], True, False),
    ("LabFault", "lab", [], True, False),
    ("LabFault", "store", [], True, False),
    ("Busy", "board", [], False, True)])
def test_only_a_board_fault_charges_the_board(sup, outcome, party, charged, retried, requeued):
    """...and every fault of the infrastructure counts, by whose, in
    benchfarm_infra_failures_total (a busy board is nobody's)."""
    run = running(sessionEnd={"attempt": 1, "outcome": outcome, "reason": "BootFailed",
                              "message": "boom", **({"party": party} if outcome == "LabFault"
                                                    and party != "lab" else {})})
    sup.rt.runs[run.key] = run
    before = {p: metrics.REGISTRY.get_sample_value("benchfarm_infra_failures_total",
                                                   {"party": p}) for p in Party}
    tick(sup, 5.0)
    assert sup.rt.charged == charged
    assert bool(sup.rt.retried) == retried and bool(sup.rt.requeued) == requeued
    if retried:    # the message names whose fault it was
        assert sup.rt.retried[0][3] == party
    assert sup.rt.launched == []
    counted = {p: metrics.REGISTRY.get_sample_value("benchfarm_infra_failures_total",
                                                    {"party": p}) - n for p, n in before.items()}
    assert counted == {p: 1.0 if retried and p == party else 0.0 for p in Party}


def test_a_run_whose_board_is_taken_again_and_again_fails_after_the_bound(sup):
    """Busy hand-backs re-queue the run, counted in status; past LabPolicy maxBusyRequeues
    the run fails BoardTaken instead of circling the queue forever. The board is never charged."""
    run = running()
    sup.rt.runs[run.key] = run
    for taken in (1, 2, 3):
        run.status = {**run.status, "phase": "Running", "sessionEnd": {
            "attempt": 1, "outcome": "Busy", "reason": "BoardBusy", "message": "held by a/b"}}
        tick(sup, 5.0 * taken)
        if taken <= 2:
            assert run.status["busyRequeues"] == taken and len(sup.rt.requeued) == taken
    assert sup.rt.finished == [(run.key, "Failed", "BoardTaken")]
    assert len(sup.rt.requeued) == 2 and sup.rt.charged == []


def test_a_session_end_that_is_not_one_is_ignored(sup):
    run = running(sessionEnd={"attempt": 1, "outcome": "Whatever"})
    sup.rt.runs[run.key] = run
    tick(sup, 5.0)
    assert sup.rt.charged == [] and sup.rt.requeued == [] and sup.rt.retried == []
