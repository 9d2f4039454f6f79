"""The embedded lab's coordinator saves labgrid's state with LibYAML: the same text labgrid's own
Dumper writes, read back by labgrid's own loader (its CPU is measured in the module's docstring,
not here)."""

from __future__ import annotations

import copy
from collections import OrderedDict

import pytest
import yaml
from labgrid.remote.common import Place, ResourceMatch
from labgrid.util import yaml as labgrid_yaml

from benchfarm_devlab.coordinator import fast_dumper


def _state(places: int) -> tuple[dict, dict]:
    """Places and resources shaped as the coordinator saves them (`_get_places`,
    `_get_resources`), one acquired, with the OrderedDicts labgrid's loader gives back."""
    saved_places = {}
    resources: dict = {"simhost": OrderedDict()}
    for i in range(places):
        name = f"b-{i:04d}"
        place = Place(name=name, tags={"pool": "flood", "rack": f"r{i // 20:02d}"},
                      matches=[ResourceMatch("simhost", name, "NetworkPowerPort")],
                      acquired="lab/run-1" if i == 7 else None, created=1.5 + i, changed=2.25)
        saved_places[name] = place.asdict()
        resources["simhost"][name] = OrderedDict(NetworkPowerPort={
            "cls": "NetworkPowerPort", "params": {"model": "simple-rest", "host": "127.0.0.1",
                                                  "index": str(i)},
            "acquired": None, "avail": True})
    return saved_places, resources


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML without LibYAML: labgrid's own")
def test_the_lab_coordinators_save_is_labgrids_own_text():
    places, resources = _state(300)
    for data in (places, resources):
        text = labgrid_yaml.dump(copy.deepcopy(data))
        assert yaml.dump(copy.deepcopy(data), Dumper=fast_dumper()) == text
        assert labgrid_yaml.load(text) == data
