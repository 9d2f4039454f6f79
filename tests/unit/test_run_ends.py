"""A run's queue timeout and its TTL's deletion are written off the owner's thread, once at a
time: however many runs a tenant times out together, a round makes no API round trip for them."""

from __future__ import annotations

from types import SimpleNamespace

from benchfarm.api.outcomes import RunFailure
from benchfarm.api.runs import BenchmarkRunSpec
from benchfarm.core.scheduling.lifecycle import Move
from benchfarm.errors import Outage, Party
from benchfarm.operator.runs.writes import RunEnds
from benchfarm.operator.state.owner import Owner
from benchfarm.operator.state.records import RunState


class HeldWriter:
    """The writer thread, held: what was submitted runs only when the test says."""

    def __init__(self) -> None:
        self.held: list = []

    def submit(self, fn, *args):
        self.held.append((fn, args))

    def run_all(self) -> None:
        held, self.held = self.held, []
        for fn, args in held:
            fn(*args)


def state(name, phase="Pending", **spec):
    spec = BenchmarkRunSpec(selector={"deviceType": "qemu-x86"}, plan="demo", **spec)
    return RunState("team", name, f"uid-{name}", 1, 0.0, spec, {"phase": phase})


def ends(finish, delete_run) -> tuple[RunEnds, HeldWriter]:
    writer = HeldWriter()
    rt = SimpleNamespace(owner=Owner(), writer=writer,
                         writes=SimpleNamespace(finish=finish),
                         kube=SimpleNamespace(delete_run=delete_run))
    return RunEnds(rt), writer  # type: ignore[arg-type]


def test_queue_timeouts_go_to_the_writer_once_each_until_written():
    finished: list[tuple[str, Move, str]] = []
    sched, writer = ends(lambda r, move, reason, msg: finished.append((r.key, move, reason)),
                              lambda ns, name: None)
    runs = [state(f"r{i}", queueTimeoutSeconds=60) for i in range(3)]
    sched.expire(runs, now=100.0)
    assert not finished and len(writer.held) == 3        # nothing written on the owner's thread
    sched.expire(runs, now=101.0)                         # the next round: already on their way
    assert len(writer.held) == 3
    writer.run_all()
    assert finished == [(f"team/r{i}", Move.queue_timeout, RunFailure.queue_timeout)
                        for i in range(3)]
    assert not sched.ending
    sched.expire([state("young", queueTimeoutSeconds=600)], now=100.0)
    assert not writer.held                                # its limit is not reached


def test_an_outage_leaves_the_end_to_the_next_round():
    calls: list[str] = []

    def delete_run(ns: str, name: str) -> None:
        calls.append(name)
        if len(calls) == 1:
            raise Outage("the API server is down", party=Party.api)
    sched, writer = ends(lambda *a: None, delete_run)
    done = state("done", phase="Succeeded", ttlSecondsAfterFinished=0)
    done.status = {**done.status, "completionTime": "2026-01-01T00:00:00Z"}
    sched.ttl([done], now=2e9)
    writer.run_all()                                      # the outage: logged, not raised
    assert calls == ["done"] and not sched.ending
    sched.ttl([done], now=2e9)
    writer.run_all()
    assert calls == ["done", "done"]
