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

from benchfarm_devlab.coordinator import QuietLoopPolicy, fast_dumper


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


def test_the_lab_coordinators_loop_stays_out_of_debug_mode_labgrid_turns_on(monkeypatch):
    """labgrid's `main` calls `loop.set_debug(True)` on the loop `asyncio.new_event_loop` gives
    it; under the lab's policy that loop stays out of debug mode unless asyncio is asked for it."""
    monkeypatch.delenv("PYTHONASYNCIODEBUG", raising=False)
    loop = QuietLoopPolicy().new_event_loop()
    try:
        loop.set_debug(True)
        assert not loop.get_debug()
        monkeypatch.setenv("PYTHONASYNCIODEBUG", "1")
        loop.set_debug(True)
        assert loop.get_debug()
    finally:
        loop.close()


def test_labgrids_coordinator_main_still_asks_for_debug_mode():
    """What the policy is there for: if labgrid stops turning debug mode on, it can go."""
    import inspect

    from labgrid.remote import coordinator
    assert "loop.set_debug(True)" in inspect.getsource(coordinator.main)
