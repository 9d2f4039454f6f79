"""The operator's run index: what a scheduling round reads follows every change of a run."""

from __future__ import annotations

from benchfarm.api.models import BenchmarkRunSpec
from benchfarm.core.queue import QueueEntry, Selector
from benchfarm.kube.state import RunIndex, RunState


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
    run.starting = True                         # picked by a round
    update(index, run)
    assert "team/r" not in index.queue and set(index.active) == {"team/r"}
    assert not index.queue_timeouts
    run.starting, run.status["phase"] = False, "Running"
    update(index, run)
    assert set(index.active) == {"team/r"}
    run.status["phase"] = "Succeeded"
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
    c.status["phase"] = "Pending"               # re-queued after a board fault
    update(index, c)
    assert not index.active and list(index.queue.keys()) == ["team/c"]
