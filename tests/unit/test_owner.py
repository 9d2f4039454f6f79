"""The owner thread (`operator.state.owner`): the only writer of the lab's records. Other threads reach it
by message: `post` (kopf's handlers: they never wait) and `call` (a launch thread handing over
its answer: it waits, and gets what the owner returned or raised). A record changed by any other
thread once the owner runs is reported as a bug and counted: the stack tests read that count."""

from __future__ import annotations

import threading
import time

import pytest

from benchfarm.api.runs import BenchmarkRunSpec
from benchfarm.operator.state import metrics, owner as owning
from benchfarm.operator.state.owner import Owner
from benchfarm.operator.state.records import (
    BoardRecord,
    Boards,
    LeaseState,
    Owned,
    RunIndex,
    RunState,
)


def off_owner(record: str) -> float:
    return metrics.REGISTRY.get_sample_value("benchfarm_off_owner_writes_total",
                                             {"record": record}) or 0.0


@pytest.fixture
def running():
    """An owner thread whose tick counts its turns; stopped after the test."""
    ticks: list[int] = []
    o = Owner(name="test-owner")
    o.start(lambda: ticks.append(len(ticks)), lambda: 0.05)
    yield o, ticks
    o.stop()
    assert not o.alive() and owning._ident is None


def run_state() -> RunState:
    return RunState("ns", "r", "uid", 1, time.time(),
                    BenchmarkRunSpec.model_validate({"selector": {"deviceType": "qemu-x86"}}), {})


def test_a_call_runs_on_the_owner_thread_and_returns_or_raises_there(running):
    o, _ = running
    assert not o.mine()
    assert o.call(threading.get_ident) == o.ident != threading.get_ident()
    assert o.call(lambda a, b=0: a + b, 2, b=3) == 5
    with pytest.raises(KeyError):
        o.call({}.__getitem__, "missing")
    assert o.call(o.mine)           # and on its own thread, a call runs at once (no deadlock)
    assert o.call(lambda: o.call(lambda: 7)) == 7


def test_posts_are_served_in_order_and_the_tick_runs_between_batches(running):
    o, ticks = running
    seen: list[int] = []
    for i in range(600):
        o.post(seen.append, i)
    o.call(lambda: None)            # after everything posted before it
    assert seen == list(range(600))
    before = len(ticks)
    time.sleep(0.3)                 # nothing comes: the tick still runs when due
    assert len(ticks) > before


def test_a_posted_handler_that_fails_is_a_bug_and_the_owner_goes_on(running, caplog):
    o, _ = running
    bugs = metrics.REGISTRY.get_sample_value("benchfarm_operator_bugs_total") or 0.0
    o.post(lambda: 1 / 0)
    assert o.call(lambda: "still here") == "still here"
    assert metrics.REGISTRY.get_sample_value("benchfarm_operator_bugs_total") == bugs + 1
    assert any("message to the owner failed" in r.getMessage() for r in caplog.records)


def test_a_record_changed_off_the_owner_thread_is_counted_and_on_it_is_not(running, caplog):
    o, _ = running
    run, board, index = o.call(run_state), o.call(BoardRecord, "b1"), RunIndex()
    lease = o.call(lambda: LeaseState("ns", "l", "uid", 1, 0.0, None, {}))  # type: ignore[arg-type]
    runs, boards = Owned[str, RunState]("run"), Boards()
    before = {k: off_owner(k) for k in ("run", "board", "lease", "index")}

    def on_owner() -> None:
        run.status = {"phase": "Pending"}
        board.run = run.key
        lease.busy = True
        runs[run.key] = run
        boards["b1"] = board
        index.update(run, None)
    o.call(on_owner)
    assert {k: off_owner(k) for k in before} == before

    run.spec = run.spec                       # this thread: each kind of record says so
    board.maintenance = True
    lease.busy = False
    runs.pop(run.key)
    boards["b2"] = BoardRecord("b2")          # (a new record's own fields are set here too)
    index.forget(run.key)
    after = {k: off_owner(k) - before[k] for k in before}
    assert after["run"] == 2 and after["lease"] == 1 and after["index"] == 1
    assert after["board"] >= 2
    assert any("not by the lab's owner thread" in r.getMessage() for r in caplog.records)


def test_before_the_owner_runs_and_after_it_stopped_every_thread_may_write():
    o = Owner()
    assert o.mine() and o.call(threading.get_ident) == threading.get_ident()
    seen: list[int] = []
    o.post(seen.append, 1)           # at once, on this thread
    assert seen == [1]
    before = off_owner("run")
    run_state().status = {}
    assert off_owner("run") == before
    o.start(lambda: None, lambda: 1.0)
    o.stop()
    assert o.call(threading.get_ident) == threading.get_ident()
