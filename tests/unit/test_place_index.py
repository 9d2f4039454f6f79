"""Reading places through the exporter/group index finds exactly what full matching finds."""

from __future__ import annotations

from labgrid.remote.common import Place, ResourceEntry, ResourceMatch

from benchfarm.lab.coordinator import _candidates


def entry(cls):
    return ResourceEntry({"cls": cls, "params": {}})


RESOURCES = {
    "rack1": {"b1": {"NetworkSerialPort": entry("NetworkSerialPort"),
                     "NetworkPowerPort": entry("NetworkPowerPort")},
              "b2": {"RawSerialPort": entry("RawSerialPort")}},
    "rack2": {"b1": {"PDUDaemonPort": entry("PDUDaemonPort")}},
}


def matched(place):
    return sorted((e, g, n) for e, g, n, r in _candidates(place, RESOURCES)
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
