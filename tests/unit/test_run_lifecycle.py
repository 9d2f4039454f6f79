"""A run's lifecycle (`core.scheduling.lifecycle`): every move of the table allowed from its
phases, no longer due once the run has moved on, refused from every other phase; the table's
rows naming writers that exist; the operator's writers (`operator.runs.writes.RunWrites`, the
supervisor's launch) writing only what the table allows, a refusal reported as a bug. And the
round's decisions `tests/unit/test_rounds.py` leaves out: who counts as holding a seat, who may
be named an heir, and how many runs a round may start."""

from __future__ import annotations

import importlib
from types import SimpleNamespace
from typing import Any

import pytest

from benchfarm.api.outcomes import FINISHED, Phase, Reason, RunFailure
from benchfarm.api.runs import BenchmarkRunSpec
from benchfarm.core.policy import trust
from benchfarm.core.scheduling import lifecycle, transitions
from benchfarm.core.scheduling.lifecycle import MOVES_OF_A_RUN, Move, RefusedMove, Side
from benchfarm.operator.runs import sessions
from benchfarm.operator.runs.writes import RunEnds, RunWrites
from benchfarm.operator.state import metrics
from benchfarm.operator.state.owner import Owner
from benchfarm.operator.state.records import RunState
from tests.unit.test_rounds import Run, entry, plan

PHASES: list[str | None] = [None, *Phase]
OPERATOR = [m for m, s in MOVES_OF_A_RUN.items() if s.side is Side.operator]


def cases() -> list[tuple[Move, str | None]]:
    return [(m, p) for m in OPERATOR for p in PHASES]


@pytest.mark.parametrize(("move", "phase"), cases())
def test_every_operator_move_is_allowed_from_its_phases_only(move, phase):
    step = MOVES_OF_A_RUN[move]
    if phase in step.from_:
        assert lifecycle.check(move, phase) is True and lifecycle.allows(move, phase)
    elif phase in step.overtaken:
        assert lifecycle.check(move, phase) is False and not lifecycle.allows(move, phase)
    else:
        with pytest.raises(RefusedMove) as refused:
            lifecycle.check(move, phase, "team/r")
        assert refused.value.move is move and refused.value.phase == phase
        assert "team/r" in str(refused.value) and move.value in str(refused.value)


def test_the_table_reads_as_the_lifecycle():
    rows = MOVES_OF_A_RUN
    # a new run is admitted or refused, nothing else
    assert {m for m in OPERATOR if lifecycle.allows(m, None)} == \
        {Move.admit, Move.refuse, Move.cancel_queued}
    # a queued run is launched, cancelled, timed out or told its place; a running one resumed,
    # seated, handed back, re-queued or ended; a finished one only deleted
    assert {m for m in OPERATOR if lifecycle.allows(m, Phase.pending)} == \
        {Move.launch, Move.cancel_queued, Move.queue_timeout, Move.position}
    assert {m for m in OPERATOR if lifecycle.allows(m, Phase.running)} == \
        {Move.go_ahead, Move.relay, Move.resume, Move.requeue, Move.fail, Move.cancel_ended}
    for done in FINISHED:
        assert [m for m in rows if lifecycle.allows(m, done)] == [Move.ttl]
    # every phase is reached, and the operator's ends are exactly the moves to a finished phase
    assert {s.to for s in rows.values()} >= set(Phase)
    assert lifecycle.ENDS == {Move.refuse, Move.cancel_queued, Move.queue_timeout, Move.fail,
                              Move.cancel_ended}
    # a run's own session ends it, or hands it back: those are the session's, not checked here
    for m in (Move.succeed, Move.fail_own, Move.cancel_own, Move.hand_back):
        assert rows[m].side is Side.session
        with pytest.raises(ValueError):
            lifecycle.check(m, Phase.running)


@pytest.mark.parametrize("move", list(MOVES_OF_A_RUN))
def test_each_row_names_a_writer_and_a_maker_that_exist(move):
    step = MOVES_OF_A_RUN[move]
    if step.writes.startswith("transitions."):
        assert callable(getattr(transitions, step.writes.removeprefix("transitions.")))
    path = step.by.split(".")
    for cut in range(len(path), 0, -1):      # the longest importable prefix, then attributes
        try:
            target: Any = importlib.import_module("benchfarm." + ".".join(path[:cut]))
        except ModuleNotFoundError:
            continue
        for name in path[cut:]:
            target = getattr(target, name)
        break
    else:
        pytest.fail(f"{step.by} is no module of benchfarm")
    assert step.on


# -- the writers, on the table -------------------------------------------------------------------

class Kube:
    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.events: list[str] = []

    def patch_run_status(self, namespace, name, status):
        self.patches.append((name, status))
        return {"metadata": {}, "status": status}

    def event(self, ref, kind, reason, message):
        self.events.append(reason)


def record(name: str = "r", phase: str | None = "Running", **status) -> RunState:
    spec = BenchmarkRunSpec(selector={"deviceType": "qemu-x86"}, plan="demo")
    return RunState("team", name, f"uid-{name}", 1, 0.0, spec, {"phase": phase, **status})


def writes() -> tuple[RunWrites, Kube]:
    kube = Kube()
    rt = SimpleNamespace(owner=Owner(), kube=kube, runs={}, reindex=lambda run: None)
    return RunWrites(rt), kube  # type: ignore[arg-type]


def bugs() -> float:
    return metrics.REGISTRY.get_sample_value("benchfarm_operator_bugs_total") or 0.0


def test_an_allowed_move_is_written_and_mirrored_in_the_record():
    w, kube = writes()
    run = record()
    assert w.write(run, Move.resume, transitions.resumed(1, 3)) is True
    assert kube.patches and run.status["resumes"] == 1


def test_a_refused_move_is_a_bug_reported_and_not_written():
    w, kube = writes()
    run = record(phase=None)                     # never admitted: nothing to resume
    before = bugs()
    assert w.write(run, Move.resume, transitions.resumed(1, 3)) is False
    assert kube.patches == [] and bugs() == before + 1


def test_a_move_the_run_has_outrun_is_no_longer_due_and_no_bug():
    w, kube = writes()
    before = bugs()
    ended = record(phase=Phase.succeeded)        # its session wrote its end meanwhile
    w.finish(ended, Move.fail, Reason.too_many_resumes, "gave up")
    w.requeue(ended, "busy", avoid=None)
    launched = record("q", phase=Phase.running)  # launched between the round and the write
    w.finish(launched, Move.queue_timeout, RunFailure.queue_timeout, "waited")
    requeued = record("s", phase=Phase.pending)  # handed back before its go-ahead was written
    go_ahead = trust.sign_go_ahead(b"k" * 32, requeued.uid, 1)
    assert w.write(requeued, Move.go_ahead, transitions.go_ahead(go_ahead)) is False
    assert kube.patches == [] and kube.events == [] and bugs() == before
    assert ended.phase == Phase.succeeded and launched.phase == Phase.running


def test_finish_writes_the_phase_its_move_leads_to_and_only_ends():
    w, kube = writes()
    run = record()
    w.finish(run, Move.cancel_ended, Reason.cancelled, "its session had ended")
    assert run.phase == Phase.cancelled and kube.events == [Reason.cancelled]
    waiting = record("w", phase=Phase.pending)
    w.finish(waiting, Move.queue_timeout, RunFailure.queue_timeout, "no board")
    assert waiting.phase == Phase.failed
    with pytest.raises(ValueError):
        w.finish(record("x"), Move.resume, Reason.cancelled, "not an end")


def test_a_requeue_goes_back_to_pending_without_its_board():
    w, _ = writes()
    run = record(board="b1", avoidBoards=["b0"])
    w.requeue(run, "lab fault on b1", avoid="b1")
    assert run.phase == Phase.pending and run.status["board"] is None
    assert run.status["avoidBoards"] == ["b0", "b1"]


def test_only_a_finished_run_past_its_ttl_is_deleted():
    deleted: list[str] = []
    writer = SimpleNamespace(submit=lambda fn: fn())
    rt = SimpleNamespace(owner=Owner(), writer=writer,
                         kube=SimpleNamespace(delete_run=lambda ns, name: deleted.append(name)))
    ends = RunEnds(rt)  # type: ignore[arg-type]
    spec = {"ttlSecondsAfterFinished": 0}
    runs = []
    for name, phase in (("done", Phase.failed), ("busy", Phase.running), ("new", None)):
        r = record(name, phase=phase, completionTime="2026-01-01T00:00:00Z")
        r.spec = r.spec.model_copy(update=spec)
        runs.append(r)
    ends.ttl(runs, now=2e9)
    assert deleted == ["done"]


def test_a_launch_the_table_does_not_allow_writes_nothing_and_frees_the_board():
    freed: list[tuple[str, str]] = []
    kube = SimpleNamespace(guarded_status_write=lambda *a: pytest.fail("written"))
    rt = SimpleNamespace(owner=Owner(), kube=kube, signing_key=b"k" * 32,
                         reindex=lambda run: None,
                         inventory=SimpleNamespace(free=lambda b, k: freed.append((b, k))))
    rt.writes = RunWrites(rt)  # type: ignore[arg-type]
    sup = sessions.Supervisor(rt)  # type: ignore[arg-type]
    cancelled = record(phase=Phase.cancelled)   # cancelled between the round and its launch
    sup.launch(cancelled, "b1", seated=True)
    assert freed == [("b1", "team/r")] and "team/r" not in sup.launched


# -- a round's decisions ---------------------------------------------------------------------------

def test_a_starting_run_holds_its_seat_but_is_named_no_heir_and_not_checked():
    starting = Run("team-a/starting", board="b1", starting=True)
    seated = Run("team-a/seated", board="b2", seated_at=50.0)
    p = plan([starting, seated], waiting=[entry("team-a/next")], free=["b3"], max_sessions=2,
             standby_max=1)
    assert [(x.run.key, x.seated, x.heir.key if x.heir else None) for x in p.launches] == \
        [("team-a/next", False, "team-a/seated")]
    assert p.relays_taken == [] and p.relay_checks == []


def test_a_run_whose_session_does_not_hold_its_place_is_no_heir():
    unheld = Run("team-a/unheld", board="b1", holds_place=False)
    p = plan([unheld], waiting=[entry("team-a/next")], free=["b2"], max_sessions=1,
             standby_max=1)
    assert [(x.seated, x.heir) for x in p.launches] == [(False, None)]


def test_a_released_board_or_a_standby_session_holds_no_seat():
    released = Run("team-a/released", board="b1", released=True)
    p = plan([released], waiting=[entry("team-a/next")], free=["b2"], max_sessions=1)
    assert [(x.run.key, x.seated) for x in p.launches] == [("team-a/next", True)]
    standby = Run("team-a/standby", board="b1", standby=True)
    assert plan([standby], max_sessions=1).go_aheads == [standby]


def test_a_granted_seat_counts_but_is_named_no_heir():
    granting = Run("team-a/granting", board="b1", granting=True)
    p = plan([granting], waiting=[entry("team-a/next")], free=["b2"], max_sessions=1,
             standby_max=1)
    assert [(x.seated, x.heir) for x in p.launches] == [(False, None)]


def test_a_round_starts_no_more_runs_than_its_seats_and_standby_slots():
    held = Run("team-a/held", board="b0", seated_at=10.0)
    waiting = [entry(f"team-a/w{i}", created=i) for i in range(5)]
    p = plan([held], waiting=waiting, free=["b1", "b2", "b3", "b4", "b5"], max_sessions=2,
             standby_max=2)
    assert [(x.run.key, x.seated) for x in p.launches] == \
        [("team-a/w0", True), ("team-a/w1", False), ("team-a/w2", False)]


def test_with_no_free_board_free_seats_start_nothing_and_the_queue_is_not_read():
    p = plan([], waiting=[entry("team-a/w")], free=[], max_sessions=4)
    assert p.launches == [] and p.order is None
