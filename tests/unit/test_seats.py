"""Which runs count against the session seats (`Runtime.standing_by`): a relay the operator has
decided but not yet written names its seat like one its run's status holds, so that seat never
counts as free while the write is on its way (a full bench had 13-14 boards powered by 12
seats: the seat a launching run was named went to another run as well)."""

from __future__ import annotations

from types import SimpleNamespace

from benchfarm.api.grants import Relay
from benchfarm.api.models import BenchmarkRunSpec
from benchfarm.core import trust
from benchfarm.kube.runtime import Runtime
from benchfarm.kube.state import RunState
from benchfarm.lab.coordinator import run_holder

KEY = b"k" * 32


def run(name, **status):
    spec = BenchmarkRunSpec(selector={"deviceType": "sim-board"}, plan="p")
    return RunState("team", name, f"uid-{name}", 1, 0.0, spec, status)


def operator(holder_releases: bool):
    """The seat `p0` is held by the run `h` until it lets go (its status says boardReleased)."""
    h = run("h", phase="Running", board="p0", attempts=1, boardReleased=holder_releases)
    rt = SimpleNamespace(signing_key=KEY, naming=set(), runs={h.key: h},
                         boards={"p0": SimpleNamespace(run=h.key)})
    rt._seat_held = lambda relay: Runtime._seat_held(rt, relay)
    return rt, Relay(place="p0", holder=run_holder(h.uid))


def standing_by(rt, r):
    return Runtime.standing_by(rt, r)


def test_a_run_launched_on_standby_with_a_relay_takes_the_seat_when_its_holder_lets_go():
    for released in (False, True):
        rt, relay = operator(released)
        r = run("r", phase="Pending")
        r.starting, r.after = True, relay          # its launch (the Running write) on its way
        assert standing_by(rt, r) is not released
    rt, _ = operator(True)
    r = run("r", phase="Pending")
    r.starting = True                            # on standby with no seat named: waits
    assert standing_by(rt, r)


def test_a_relay_being_named_counts_like_a_written_one():
    for released in (False, True):
        rt, relay = operator(released)
        r = run("r", phase="Running", board="p1", attempts=1)
        r.after = relay
        rt.naming.add(r.key)                     # the relay's write on its way
        assert standing_by(rt, r) is not released
        rt.naming.clear()                        # written: its status holds it
        r.status["goAhead"] = trust.sign_go_ahead(KEY, r.uid, 1, relay)
        assert standing_by(rt, r) is not released


def test_a_granted_seat_and_a_plain_go_ahead_are_never_standby():
    rt, relay = operator(False)
    r = run("r", phase="Running", board="p1", attempts=1)
    r.granting = True
    assert not standing_by(rt, r)
    r.granting = False
    r.status["goAhead"] = trust.sign_go_ahead(KEY, r.uid, 1)
    assert not standing_by(rt, r)
    r.status["goAhead"] = None                  # no go-ahead at all: standby
    assert standing_by(rt, r)
