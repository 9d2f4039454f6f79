"""Keeping granted BoardLeases (operator.leases.tending): the owner's thread only decides what is due
and marks the lease busy; the writes (a warning, the end) are made on a launch thread, once."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

from benchfarm.api.labpolicy import LabPolicySpec
from benchfarm.api.leases import BoardLeaseSpec
from benchfarm.api.outcomes import LeasePhase, LeaseReason
from benchfarm.errors import Outage, Party
from benchfarm.operator.leases.tending import LeaseTender
from benchfarm.operator.state.owner import Owner
from benchfarm.operator.state.records import LeaseState

T0 = 1_800_000_000.0


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Book:
    def __init__(self, leases: list[LeaseState]) -> None:
        self.leases, self.writes = leases, []
        self.fail = False

    def active(self) -> list[LeaseState]:
        return list(self.leases)

    def write(self, ns: str, name: str, status: dict) -> bool:
        if self.fail:
            raise Outage("the API server is down", party=Party.api)
        self.writes.append(status)
        for lease in self.leases:
            if lease.name == name:
                lease.status = {**lease.status, **status}
        return True


def tender(lease: LeaseState) -> tuple[LeaseTender, Book, list]:
    held: list = []
    events: list = []
    rt = SimpleNamespace(
        owner=Owner(), policy=LabPolicySpec(leaseWarningSeconds=300),
        launches=SimpleNamespace(submit=lambda fn, *args: held.append((fn, args))),
        inventory=SimpleNamespace(boards={}, last_refresh=0.0),
        kube=SimpleNamespace(event=lambda obj, kind, reason, message: events.append(reason)),
        notify=lambda event: None, signing_key=b"k" * 32,
        launch_session=lambda req: "pid 1")
    book = Book([lease])
    return LeaseTender(rt, book, holds=None), book, held  # type: ignore[arg-type]


def granted(expires: float) -> LeaseState:
    spec = BoardLeaseSpec(selector={"board": "vb-0"}, duration="1h", user="host/alice")
    return LeaseState("team", "l", "uid-l", 1, T0, spec, {
        "phase": LeasePhase.granted, "place": "vb-0", "grantedAt": iso(expires - 3600),
        "expiresAt": iso(expires)})


def run(held: list) -> None:
    while held:
        fn, args = held.pop(0)
        fn(*args)


def test_a_warning_is_decided_on_the_owner_and_written_apart_once():
    lease = granted(T0 + 200)                   # inside the 300 s warning
    t, book, held = tender(lease)
    t.tend(T0)
    assert lease.busy and len(held) == 1 and book.writes == []   # nothing written yet
    t.tend(T0 + 1)                              # busy: not decided again
    assert len(held) == 1
    run(held)
    assert book.writes == [{"warnedFor": iso(T0 + 200)}] and not lease.busy
    t.tend(T0 + 2)                              # warned: nothing due until the end
    assert held == []


def test_the_end_waits_out_an_outage_and_comes_at_the_next_round():
    lease = granted(T0 - 1)                     # expired
    lease.status = {**lease.status, "warnedFor": lease.status["expiresAt"]}
    t, book, held = tender(lease)
    book.fail = True
    t.tend(T0)
    run(held)                                   # the outage: logged, the lease free again
    assert not lease.busy and book.writes == []
    book.fail = False
    t.tend(T0 + 5)
    run(held)
    assert book.writes[0]["phase"] == LeasePhase.releasing
    assert book.writes[0]["endReason"] == LeaseReason.expired
    assert lease.ending_since is not None and not lease.busy
    t.tend(T0 + 6)                              # releasing, its end session launched: not due
    assert held == []
