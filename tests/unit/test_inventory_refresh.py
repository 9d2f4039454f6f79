"""The inventory's refresh walks what changed in the coordinator and every place someone holds,
not every place every few seconds (operator.boards.inventory.refresh with the coordinator's `changes`): an
unchanged free place keeps its record as it was, a change is seen at the next refresh, and a
place held by a run that no longer runs there is still found (and released) although the place
itself never changed."""

from __future__ import annotations

from types import SimpleNamespace

from benchfarm.api.devicetype import DeviceType
from benchfarm.api.labpolicy import LabPolicySpec
from benchfarm.api.places import PlaceInfo, run_identity
from benchfarm.operator.boards import inventory
from benchfarm.operator.state.owner import Owner


class FakeRuntime:
    def __init__(self, places: dict[str, PlaceInfo]) -> None:
        self.owner = Owner()             # not started: its calls run on the caller's thread
        self.namespace = "benchfarm"
        self.inventory_known = False
        self.policy = LabPolicySpec()
        self.device_types = {"sim": DeviceType(name="sim", console={"prompt": "# "},
                                               boot={"timeoutSeconds": 30, "retries": 1})}
        self.places, self.changed = places, set(places)
        self.released: list[tuple[str, str]] = []
        self.created: list[str] = []
        self.kube = SimpleNamespace(create_board=self.create_board,
            patch_board_status=lambda name, st: None,
            event=lambda *a: None)
        # the launch threads, inline: a read of the coordinator is back at once
        self.launches = SimpleNamespace(submit=lambda fn, *args: fn(*args))
        self.coordinator = SimpleNamespace(
            identity="operator/benchfarm", changes=self.changes,
            release=lambda name, holder: self.released.append((name, holder)) or True)

    def create_board(self, name: str, labels: dict[str, str]) -> dict:
        self.created.append(name)
        return {"metadata": {"uid": f"uid-{name}"}}

    def changes(self) -> tuple[dict[str, PlaceInfo], set[str]]:
        changed, self.changed = self.changed, set()
        return dict(self.places), changed

    def set(self, place: PlaceInfo) -> None:
        self.places[place.name] = place
        self.changed.add(place.name)

    def active_runs(self) -> list:
        return []

    def active_lease_places(self) -> dict[str, str]:
        return {}

    def wake(self) -> None:
        pass


def place(name: str, acquired: str | None = None, **tags: str) -> PlaceInfo:
    return PlaceInfo(name, tags={"device_type": "sim", **tags}, acquired=acquired,
                     resources={"NetworkSerialPort": {"port": 1}})


def test_a_refresh_walks_what_changed_and_what_is_held():
    rt = FakeRuntime({f"p{i}": place(f"p{i}") for i in range(5)})
    inv = inventory.Inventory(rt)
    inv.refresh(force=True)
    assert sorted(rt.created) == [f"p{i}" for i in range(5)] and rt.inventory_known
    assert inv.boards["p3"].uid == "uid-p3"
    assert all(b.state == "Idle" for b in inv.boards.values())

    # a record touched behind the refresh's back stays as it is while its place does not change
    inv.boards["p0"].labels = {"stale": "1"}
    rt.set(place("p1", rack="r7"))
    inv.refresh(force=False)        # within REFRESH_EVERY: nothing read at all
    assert inv.boards["p1"].labels == {}
    inv.read_at = 0.0
    inv.refresh()
    assert inv.boards["p1"].labels == {"rack": "r7"}
    assert inv.boards["p0"].labels == {"stale": "1"}, "an unchanged free place was walked"

    # a run's session holds p2; the run does not run (there): an orphan, seen twice, released,
    # though the place changed only once
    host, user = run_identity("uid-gone")
    rt.set(place("p2", acquired=f"{host}/{user}"))
    inv.read_at = 0.0
    inv.refresh()
    assert rt.released == [] and inv.boards["p2"].holder == f"{host}/{user}"
    inv.read_at = 0.0
    inv.refresh()
    assert rt.released == [("p2", f"{host}/{user}")]

    # every place again after WALK_ALL_EVERY
    inv.read_at, inv.walked_all = 0.0, 0.0
    inv.refresh()
    assert inv.boards["p0"].labels == {}


def test_the_kinds_a_selector_matches_are_kept_until_a_board_comes_or_changes():
    """Admission asks every run's selector; the answer is the boards' (busy or not) and is kept
    until a board arrives or changes its type or labels, for at most KINDS_KEPT selectors."""
    from benchfarm.core.scheduling.queue import Selector
    rt = FakeRuntime({"p0": place("p0", rack="r1"), "p1": place("p1", rack="r2")})
    rt.device_types["gpu"] = DeviceType(name="gpu", console={"prompt": "# "},
                                        boot={"timeoutSeconds": 30, "retries": 1})
    inv = inventory.Inventory(rt)
    inv.refresh(force=True)
    r1, r3 = Selector.of(labels={"rack": "r1"}), Selector.of(labels={"rack": "r3"})
    assert inv.kinds_matching(r1) == {"sim"} and inv.kinds_matching(r3) == frozenset()
    inv.boards["p1"].run = "team/r1"               # busy boards still count: no change of shape
    assert inv.kinds_matching(Selector.of(board="p1")) == {"sim"}
    assert inv.kinds_matching(Selector.of(board="p7")) == frozenset()      # no such board
    assert inv.kinds_matching(Selector.of("gpu", board="p0")) == frozenset()   # not of that type
    shape = inv.shape
    inv.read_at = 0.0
    inv.refresh()                                 # nothing changed: the answers stay
    assert inv.shape == shape and r1 in inv.kinds
    rt.set(PlaceInfo("p1", tags={"device_type": "gpu", "rack": "r3"}, acquired=None,
                     resources={"NetworkSerialPort": {"port": 1}}))
    inv.read_at = 0.0
    inv.refresh()
    assert inv.kinds_matching(r3) == {"gpu"}, "a board's new labels were not seen"
    assert inv.kinds_matching(Selector.of(board="p1")) == {"gpu"}
    rt.set(place("p9", rack="r3"))                 # a new board: its Board created apart,
    inv.read_at = 0.0
    inv.refresh()
    assert rt.created[-1] == "p9" and "p9" not in inv.boards
    inv.read_at = 0.0                              # and walked at the next refresh, though its
    inv.refresh()                                  # place did not change again
    assert inv.boards["p9"].uid == "uid-p9"
    assert inv.kinds_matching(r3) == {"gpu", "sim"}
    for i in range(inventory.KINDS_KEPT + 10):     # made-up selectors do not grow the operator
        inv.kinds_matching(Selector.of(labels={"rack": f"x{i}"}))
    assert len(inv.kinds) <= inventory.KINDS_KEPT


def test_the_rounds_index_follows_the_boards_it_was_told_of():
    """What a round schedules over (`Inventory.board_index`): every board the refresh found,
    less the one a run holds, the same one back once freed, a board no refresh has typed never."""
    rt = FakeRuntime({f"p{i}": place(f"p{i}") for i in range(4)})
    inv = inventory.Inventory(rt)
    inv.refresh(force=True)
    assert sorted(inv.board_index().views) == ["p0", "p1", "p2", "p3"]
    inv.claim("p1", "team/run-1")
    inv.claim("p9", "team/run-9")          # adopted before any refresh saw its place
    assert sorted(inv.board_index().views) == ["p0", "p2", "p3"]
    inv.boards["p2"].maintenance = True
    assert sorted(inv.board_index().views) == ["p0", "p3"]
    inv.free("p1", "team/run-1")
    inv.boards["p2"].maintenance = False
    assert sorted(inv.board_index().views) == ["p0", "p1", "p2", "p3"]
    assert not inv.boards.changed


def test_a_board_network_audit_holds_a_board_without_being_a_direct_lock():
    """`benchfarm check --boards` holds a place under its own identity for a minute: the board
    is not schedulable meanwhile, but it is benchfarm's own lock (no DirectLock condition or
    event, where a person's lock under `directLocks: Report` gets both) and never an orphan."""
    from benchfarm.api.boards import DirectLocks
    from benchfarm.api.places import is_netcheck, netcheck_identity
    audit = "/".join(netcheck_identity("pod-1", 42))
    assert is_netcheck(audit) and not is_netcheck("desk/alice") and not is_netcheck(None)
    rt = FakeRuntime({"p0": place("p0", acquired=audit), "p1": place("p1", acquired="desk/alice")})
    rt.policy = LabPolicySpec(directLocks=DirectLocks.report)
    events: list[tuple] = []
    rt.kube.event = lambda *a: events.append(a)
    inv = inventory.Inventory(rt)
    for _ in range(2):
        inv.read_at = 0.0
        inv.refresh(force=True)
    audited, person = inv.boards["p0"], inv.boards["p1"]
    assert audited.held_by_other == audit and audited.direct_lock is None
    assert person.held_by_other == "desk/alice" and person.direct_lock == "desk/alice"
    assert [e[2] for e in events] == ["DirectLock"] and "alice" in events[0][3]
    assert rt.released == []


def test_the_owner_applies_a_read_made_on_a_launch_thread_and_dates_it_by_its_start():
    """A read of the coordinator is made apart (it waits up to the client's timeout while the
    coordinator is away); one at a time; applied at the refresh after it came back, and the
    inventory's `last_refresh` is when that read began (a lease granted after it began is not
    judged by it: `operator.leases.tending`)."""
    rt = FakeRuntime({"p0": place("p0")})
    inv = inventory.Inventory(rt)
    inv.refresh(force=True)
    held: list = []
    rt.launches = SimpleNamespace(submit=lambda fn, *args: held.append((fn, args)))
    now = [1000.0]
    inv.reader.clock = lambda: now[0]
    rt.set(place("p0", rack="r1"))
    inv.read_at = 0.0
    inv.refresh()
    assert len(held) == 1 and inv.boards["p0"].labels == {}     # started, nothing applied
    inv.read_at = 0.0
    inv.refresh()
    assert len(held) == 1                                        # one read at a time
    fn, args = held.pop()
    fn(*args)                                                    # read at 1000.0, back later
    now[0] = 1005.0
    inv.refresh()
    assert inv.boards["p0"].labels == {"rack": "r1"} and inv.last_refresh == 1000.0
