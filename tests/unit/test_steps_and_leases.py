"""Pure parts of resumable sessions: the step list and its checkpoint names; judging Leases."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

from benchfarm.core import steps as st
from benchfarm.kubeapi.leases import LeaseObserver


def test_steps_are_boots_then_provenance_then_every_suite_per_iteration():
    steps = st.plan_steps(2, ["a", "b"], iterations=2, warmup_iterations=1)
    assert [s.name for s in steps] == [
        "boot-001", "boot-002", "provenance",
        "it-001-a", "it-001-b", "it-002-a", "it-002-b", "it-003-a", "it-003-b"]
    assert [s.warmup for s in steps if s.kind == st.SUITE] == [True, True] + [False] * 4
    assert steps[-1].suite_index == 1 and steps[-1].iteration == 3


def test_a_resume_skips_exactly_the_checkpointed_steps():
    steps = st.plan_steps(1, ["a"], iterations=3, warmup_iterations=0)
    prefix = st.checkpoint_prefix("ns/run/uid", 1)
    keys = [st.checkpoint_key("ns/run/uid", 1, s) for s in steps[:3]] + \
        [f"{prefix}it-002-a.json.tmp", "ns/run/uid/checkpoints/attempt-002/it-003-a.json"]
    done = st.done_names(keys, prefix)
    assert done == {"boot-001", "provenance", "it-001-a"}
    assert [s.name for s in st.remaining(steps, done)] == ["it-002-a", "it-003-a"]
    assert st.raw_key("p", "a", 2) == "p/raw/a/iteration-002.txt"


def test_suite_names_must_be_safe_in_keys():
    assert st.safe_name("cyclictest-idle") and st.safe_name("lat_mem_rd.v2")
    for bad in ("../x", "a/b", "", ".hidden", "a b", "x" * 64):
        assert not st.safe_name(bad), bad


def lease(name, renew, holder="runner-1", duration=15, namespace="default"):
    return SimpleNamespace(metadata=SimpleNamespace(name=name, namespace=namespace),
                           spec=SimpleNamespace(renew_time=renew, acquire_time=renew,
                                                holder_identity=holder,
                                                lease_duration_seconds=duration))


def test_a_lease_is_dead_only_after_it_stood_still_on_our_clock():
    t = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)
    obs = LeaseObserver(grace=5)
    obs.observe([lease("l", t)], now=100.0)
    assert obs.alive("default/l", now=119.0)          # 19 s <= 15 + 5
    assert not obs.alive("default/l", now=121.0)      # stood still too long
    obs.observe([lease("l", t.replace(second=10))], now=121.0)   # it moved: alive again
    assert obs.alive("default/l", now=140.0)
    assert not obs.alive("default/other", now=140.0)  # never seen: not alive


def test_after_our_own_outage_nobody_is_judged_dead_at_once():
    t = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)
    obs = LeaseObserver(grace=5)
    obs.observe([lease("l", t)], now=0.0)
    obs.forget()                                      # we could not list Leases for a while
    obs.observe([lease("l", t)], now=500.0)           # same renewTime, seen anew
    assert obs.alive("default/l", now=510.0)


def test_a_released_lease_is_not_alive():
    obs = LeaseObserver()
    obs.observe([lease("l", datetime.now(UTC), holder="")], now=0.0)
    assert not obs.alive("default/l", now=1.0)
