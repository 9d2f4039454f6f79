"""The operator's run index: what a scheduling round reads follows every change of a run."""

from __future__ import annotations

from benchfarm.api.runs import BenchmarkRunSpec
from benchfarm.core.scheduling.lifecycle import InFlight
from benchfarm.core.scheduling.queue import QueueEntry, Selector
from benchfarm.operator.state.records import RunIndex, RunState


def state(name, phase="Pending", **spec):
    spec = BenchmarkRunSpec(selector={"deviceType": "qemu-x86"}, plan="demo", **spec)
    return RunState("team", name, f"uid-{name}", 1, 0.0, spec, {"phase": phase})


def entry(run, priority=100):
    return QueueEntry(run.key, run.namespace, priority, run.created, Selector.of("qemu-x86"))


def update(index, run, priority=100):
    index.update(run, entry(run, priority) if run.waiting else None)


def test_a_run_moves_from_the_queue_to_active_to_finished_and_out():
    index = RunIndex()
    run = state("r", queueTimeoutSeconds=600, ttlSecondsAfterFinished=60)
    update(index, run)
    assert "team/r" in index.queue and set(index.queue_timeouts) == {"team/r"}
    assert not index.active and not index.ttl
    update(index, run, priority=500)            # a changed priority replaces, never duplicates
    assert len(index.queue) == 1 and index.queue.get("team/r").priority == 500
    assert run.move(InFlight.launch_seated)     # picked by a round
    update(index, run)
    assert "team/r" not in index.queue and set(index.active) == {"team/r"}
    assert not index.queue_timeouts
    assert run.move(InFlight.none)              # its launch landed
    run.status = {**run.status, "phase": "Running"}
    update(index, run)
    assert set(index.active) == {"team/r"}
    run.status = {**run.status, "phase": "Succeeded"}
    update(index, run)
    assert not index.active and set(index.ttl) == {"team/r"} and not len(index.queue)
    index.forget("team/r")
    assert not index.ttl


def test_cancelled_deleting_and_requeued_runs():
    index = RunIndex()
    a, b = state("a", cancel=True), state("b")
    update(index, a)
    update(index, b)
    assert list(index.queue.keys()) == ["team/b"]
    b.deleting = True
    update(index, b)
    assert not len(index.queue)
    c = state("c", phase="Running")
    update(index, c)
    assert set(index.active) == {"team/c"}
    c.status = {**c.status, "phase": "Pending"}     # re-queued after a board fault
    update(index, c)
    assert not index.active and list(index.queue.keys()) == ["team/c"]


# -- the operator's own writes against watch events from before them ---------------------------
def test_resource_versions_compare_as_numbers_of_one_form():
    from benchfarm.kubeapi import versions
    assert versions.older("99", "100") and not versions.older("100", "99")
    assert not versions.older("100", "100")
    # not of KEP-5504's form (or missing): nothing is said, the event is taken
    for odd in (None, "", "0", "012", "12a", "١٢", "-5"):
        assert not versions.older(odd, "100") and not versions.older("100", odd), odd


def body(rv, **status):
    return {"metadata": {"resourceVersion": rv}, "status": status}


def test_an_event_from_before_the_operators_own_write_is_stale_and_a_later_one_is_not():
    run = state("r")
    run.version = "90"                                       # its last watch event
    run.wrote(body("100", phase="Running", board="b1", attempts=1), {"phase": "Running"})
    assert run.status == {"phase": "Running", "board": "b1", "attempts": 1}
    assert run.version == "100" and run.active
    assert run.stale(body("95", phase="Pending", queuePosition=1))   # the position write's event
    assert not run.stale(body("100", phase="Running"))               # its own write's event
    assert not run.stale(body("101", phase="Running", boardReleased=True))


def test_a_write_whose_answer_is_older_than_an_event_already_seen_changes_nothing():
    run = state("r", phase="Running")
    run.status, run.version = {"phase": "Running", "boardReleased": True}, "120"
    run.wrote(body("110", phase="Running"), {"goAhead": "x"})   # the event at 120 includes it
    assert run.status == {"phase": "Running", "boardReleased": True} and run.version == "120"


def test_a_write_answered_without_a_version_merges_what_was_written():
    run = state("r")
    run.wrote({"metadata": {}}, {"phase": "Running"})
    assert run.status == {"phase": "Running"} and run.version is None
    assert not run.stale(body("1", phase="Pending"))        # nothing to compare with: taken


def test_one_decision_of_the_operator_on_its_way_at_a_time():
    """A run's launch or go-ahead, decided and on its way: another decision waits until it
    landed; what a round counts the run as follows from it."""
    run = state("r")
    assert run.waiting and not run.starting and not run.granting
    for decided, starting, granting in ((InFlight.launch_seated, True, True),
                                        (InFlight.launch_standby, True, False),
                                        (InFlight.go_ahead, False, True)):
        assert run.move(decided)
        assert (run.starting, run.granting, run.waiting) == (starting, granting, False)
        others = [s for s in InFlight if s not in (decided, InFlight.none)]
        assert not any(run.move(other) for other in others) and run.in_flight is decided
        assert run.move(InFlight.none) and run.waiting
    assert not run.move(InFlight.none)           # nothing on its way: nothing lands


def test_a_run_handed_back_while_its_go_ahead_is_written_waits_for_that_write():
    run = state("r")
    run.status = {**run.status, "phase": "Running"}
    assert run.move(InFlight.go_ahead)
    run.status = {**run.status, "phase": "Pending"}    # its session handed it back meanwhile
    assert not run.waiting                       # not assigned again before the write landed
    assert not run.move(InFlight.launch_seated)
    assert run.move(InFlight.none) and run.waiting
