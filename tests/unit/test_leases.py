"""BoardLeases in the pure parts: durations as Kubernetes writes them, and leases waiting in the
one queue with runs (fairness across namespaces, priority ceilings, board limits)."""

from __future__ import annotations

import re

import pytest

from benchfarm.api.leases import DURATION_PATTERN, BoardLeaseSpec
from benchfarm.core.scheduling import durations
from benchfarm.core.scheduling.assignment import schedule
from benchfarm.core.scheduling.boardindex import BoardView
from benchfarm.core.scheduling.fairness import RoundRobinFairness
from benchfarm.core.scheduling.queue import EntryKind, QueueEntry, Selector, lease_key

X86 = Selector.of("qemu-x86")


@pytest.mark.parametrize("text,seconds", [("90m", 5400), ("2h", 7200), ("1h30m", 5400),
                                          ("45s", 45), ("1h0m5s", 3605), ("0h10s", 10)])
def test_durations_in_the_kubernetes_form(text, seconds):
    assert durations.parse(text) == seconds
    assert durations.parse(durations.format_seconds(seconds)) == seconds


@pytest.mark.parametrize("text", ["", "0s", "0h0m", "90", "1.5h", "2d", "m", "30m1h", "-5m",
                                  "1h 30m", "10S"])
def test_what_is_not_a_duration_is_refused_alike_by_the_parser_and_the_crd(text):
    with pytest.raises(ValueError):
        durations.parse(text)
    # the CRD's pattern, or its CEL rule (a non-zero digit), refuses the same
    assert re.match(DURATION_PATTERN, text) is None or not re.search("[1-9]", text)


def test_the_pattern_is_the_parsers():
    assert durations.PATTERN == DURATION_PATTERN
    with pytest.raises(ValueError):
        BoardLeaseSpec(selector={"deviceType": "qemu-x86"}, duration="2 hours", user="desk/alice")
    spec = BoardLeaseSpec(selector={"board": "vb-x86-1"}, duration="90m", user="desk/alice")
    assert durations.parse(spec.duration) == 5400 and spec.release is False


def run(name, ns, created, prio=100):
    return QueueEntry(f"{ns}/{name}", ns, prio, created, X86)


def lease(name, ns, created, prio=100):
    return QueueEntry(lease_key(ns, name), ns, prio, created, X86, kind=EntryKind.lease)


def test_a_lease_key_never_meets_a_run_of_the_same_name():
    assert lease_key("a", "x") != "a/x"


def test_a_lease_takes_its_namespaces_turn_in_the_same_queue():
    """Runs of two namespaces queued first, a lease of a third: granted in the round-robin order,
    after each of the others had one turn, not after every run queued before it."""
    fair = RoundRobinFairness()
    queue = [run("a1", "a", 0), run("a2", "a", 1), run("b1", "b", 2), run("b2", "b", 3),
             lease("l1", "c", 4)]
    started = []
    now = 0.0
    while queue:
        now += 1
        d = schedule(queue, [BoardView("b0", "qemu-x86")], fairness=fair, now=now)
        (a,) = d.assignments
        started.append(a.run)
        queue = [e for e in queue if e.key != a.run]
    assert started == ["a/a1", "b/b1", "lease:c/l1", "a/a2", "b/b2"]


def test_a_lease_counts_against_its_namespaces_board_limit():
    d = schedule([lease("l1", "c", 0), run("r1", "c", 1)],
                 [BoardView("b0", "qemu-x86"), BoardView("b1", "qemu-x86")],
                 running_per_namespace={"c": 1}, max_boards={"c": 2})
    assert [a.run for a in d.assignments] == ["lease:c/l1"]
    assert [e.key for e in d.order] == ["c/r1"]


def test_priority_orders_leases_and_runs_alike():
    d = schedule([run("r1", "a", 0, prio=100), lease("l1", "a", 5, prio=500)],
                 [BoardView("b0", "qemu-x86")])
    assert [a.run for a in d.assignments] == ["lease:a/l1"]


def test_only_a_grant_the_operator_signed_moves_a_board():
    from benchfarm.core.policy import trust
    from benchfarm.operator.leases.keeper import commands, trusted
    key = b"k" * 32
    status = {"phase": "Granted", "place": "vb-x86-1", "grantedAt": "2026-01-01T00:00:00Z",
              "expiresAt": "2026-01-01T01:00:00Z"}
    signed = {**status, "grantSignature": trust.sign_lease(key, "uid-1", "desk/carol", status)}
    assert trusted(key, "uid-1", "desk/carol", signed)
    assert trusted(key, "uid-1", "desk/carol", {**signed, "warnedFor": "x", "commands": {}})
    assert not trusted(key, "uid-2", "desk/carol", signed)               # another lease's grant
    assert not trusted(key, "uid-1", "desk/mallory", signed)             # given to someone else
    for field, forged in (("place", "vb-x86-0"),                         # moved to another board
                          ("expiresAt", "2026-01-02T01:00:00Z"),         # a replayed grant, later
                          ("phase", "Releasing"), ("grantedAt", "2026-01-01T00:30:00Z")):
        assert not trusted(key, "uid-1", "desk/carol", {**signed, field: forged}), field
    released = {**status, "phase": "Releasing"}
    ending = {**released, "grantSignature": trust.sign_lease(key, "uid-1", "desk/carol",
                                                             released)}
    assert trusted(key, "uid-1", "desk/carol", ending)
    assert not trusted(key, "uid-1", "desk/carol", {**ending, "phase": "Granted"})   # back
    assert not trusted(key, "uid-1", "desk/carol", status)              # none at all
    # a run's suites signature or a warm grant's never passes for a lease grant
    assert not trusted(key, "uid-1", "desk/carol", {**status, "grantSignature": trust.sign_text(
        key, trust.GRANT_PURPOSE, trust.lease_grant_text("uid-1", "desk/carol", status))})
    cmds = commands("vb-x86-1", "desk/carol", "127.0.0.1:20408")
    assert cmds["env"] == {"LG_COORDINATOR": "127.0.0.1:20408", "LG_PLACE": "vb-x86-1",
                           "LG_HOSTNAME": "desk", "LG_USERNAME": "carol"}
    assert cmds["powerCycle"] == "labgrid-client -p vb-x86-1 power cycle"
    # a coordinator that takes only certificates: its address is not handed out
    assert "LG_COORDINATOR" not in commands("vb-x86-1", "desk/carol", None)["env"]
    assert "20408" not in str(commands("vb-x86-1", "desk/carol", None))


def test_the_end_reason_a_status_names_is_one_the_operator_writes():
    """`status.endReason` is read back when the end session reports: a rewritten one is
    `Released`, never an exception in the keeper."""
    from benchfarm.api.outcomes import LeaseReason, Refusal
    from benchfarm.operator.leases.keeper import _end_reason
    assert _end_reason("Expired") == LeaseReason.expired
    assert _end_reason("StatusNotTrusted") == Refusal.statusTampered
    for junk in (None, "", "junk", 3):
        assert _end_reason(junk) == LeaseReason.released
