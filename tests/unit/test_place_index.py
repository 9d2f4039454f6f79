"""Reading places through the exporter/group index finds exactly what full matching finds."""

from __future__ import annotations

import pytest
from labgrid.remote.common import Place, ResourceEntry, ResourceMatch

from benchfarm.lab.labgrid_client import candidates


def entry(cls):
    return ResourceEntry({"cls": cls, "params": {}})


RESOURCES = {
    "rack1": {"b1": {"NetworkSerialPort": entry("NetworkSerialPort"),
                     "NetworkPowerPort": entry("NetworkPowerPort")},
              "b2": {"RawSerialPort": entry("RawSerialPort")}},
    "rack2": {"b1": {"PDUDaemonPort": entry("PDUDaemonPort")}},
}


def matched(place):
    return sorted((e, g, n) for e, g, n, r in candidates(place, RESOURCES)
                  if place.getmatch((e, g, r.cls, n)))


def full(place):
    return sorted((e, g, n) for e, groups in RESOURCES.items() for g, grp in groups.items()
                  for n, r in grp.items() if place.getmatch((e, g, r.cls, n)))


def test_exact_matches_look_only_at_their_group():
    place = Place("p", matches=[ResourceMatch("rack1", "b1", "*"),
                                ResourceMatch("rack2", "b1", "PDUDaemonPort")])
    assert matched(place) == full(place) == [
        ("rack1", "b1", "NetworkPowerPort"), ("rack1", "b1", "NetworkSerialPort"),
        ("rack2", "b1", "PDUDaemonPort")]


def test_wildcard_matches_fall_back_to_every_resource():
    place = Place("p", matches=[ResourceMatch("rack*", "b1", "*")])
    assert matched(place) == full(place) == [
        ("rack1", "b1", "NetworkPowerPort"), ("rack1", "b1", "NetworkSerialPort"),
        ("rack2", "b1", "PDUDaemonPort")]


def test_a_place_without_matches_has_no_resources():
    assert matched(Place("p")) == []


class _Session:
    """What PlaceIndex reads of labgrid's session: its places, resources and touched sets."""

    def __init__(self, places):
        self.places = {p.name: p for p in places}
        self.resources = RESOURCES
        self.touched_places, self.touched_groups = set(), set()


def test_the_index_rereads_only_places_an_update_touched(monkeypatch):
    from benchfarm.lab import labgrid_client
    read = []
    real = labgrid_client._place_info
    monkeypatch.setattr(labgrid_client, "_place_info",
                        lambda place, res: read.append(place.name) or real(place, res))
    session = _Session([Place("a", matches=[ResourceMatch("rack1", "b1", "*")]),
                        Place("b", matches=[ResourceMatch("rack2", "b1", "*")]),
                        Place("w", matches=[ResourceMatch("rack*", "b2", "*")])])
    index = labgrid_client.PlaceIndex(session)
    first = index.current()
    assert sorted(read) == ["a", "b", "w"] and first["a"].resources.keys() == {
        "NetworkSerialPort", "NetworkPowerPort"}
    read.clear()
    assert index.current() == first and read == []          # nothing changed: nothing re-read
    session.touched_groups.add(("rack2", "b1"))              # b's group, and the wildcard place
    index.current()
    assert sorted(read) == ["b", "w"]
    read.clear()
    session.places["a"].acquired = "host/user"
    session.touched_places.add("a")
    assert index.current()["a"].acquired == "host/user" and read == ["a"]
    del session.places["b"]
    session.touched_places.add("b")
    assert set(index.current()) == {"a", "w"}
    read.clear()
    session.touched_groups.add(("rack2", "b1"))              # b is gone from the group index
    index.current()
    assert read == ["w"]


def test_a_resource_its_exporter_deleted_is_left_out_not_a_crash():
    from benchfarm.lab import labgrid_client
    resources = {"rack1": {"b1": {"NetworkSerialPort": entry("NetworkSerialPort"),
                                  "NetworkPowerPort": ResourceEntry({})}}}   # labgrid empties it
    session = _Session([Place("a", matches=[ResourceMatch("rack1", "b1", "*")])])
    session.resources = resources
    assert set(labgrid_client.PlaceIndex(session).current()["a"].resources) == {"NetworkSerialPort"}


def test_a_failed_read_leaves_every_place_it_was_reading_to_the_next(monkeypatch):
    from benchfarm.lab import labgrid_client
    session = _Session([Place("a", matches=[ResourceMatch("rack1", "b1", "*")]),
                        Place("b", matches=[ResourceMatch("rack1", "b1", "*")])])
    index = labgrid_client.PlaceIndex(session)
    index.current()
    real = labgrid_client._place_info
    monkeypatch.setattr(labgrid_client, "_place_info", lambda place, res: 1 / 0)
    session.touched_groups.add(("rack1", "b1"))
    with pytest.raises(ZeroDivisionError):
        index.current()
    assert session.touched_places == {"a", "b"}
    monkeypatch.setattr(labgrid_client, "_place_info", real)
    assert set(index.current()) == {"a", "b"} and not session.touched_places
