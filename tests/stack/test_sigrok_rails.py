"""Issue 11, the sigrok path: rails measured through labgrid's SigrokDriver on sigrok's demo device.

vb-sigrok-0's exporter (vhost0) publishes a `SigrokDevice` (driver `demo`) in its group; the
place carries it, benchfarm binds labgrid's `SigrokDriver` to it per rail and sigrok-cli captures
the demo's analog patterns. The expected levels are those patterns' rectified means at amplitude
10 V: A0 square 10, A1 sine about 6.31 (20 samples a period), A2 triangle and A3 sawtooth about 5.
"""

from __future__ import annotations

import pytest
from labgrid import Target
from labgrid.driver import SigrokDriver
from labgrid.resource import SigrokDevice

import benchfarm_devlab as devlab
from benchfarm.api.devicetype import DeviceType
from benchfarm.lab.coordinator import Coordinator
from benchfarm.lab.devicetypes import load_device_types
from benchfarm.lab.rails import SigrokRailMonitor
from benchfarm.settings import Settings
from tests.stack.conftest import apply
from tests.stack.test_gpu_power import _example, _metrics
from tests.stack.test_operator import cond, custom, finished, unique  # noqa: F401

pytestmark = pytest.mark.stack
PLACE, DTYPE = "vb-sigrok-0", "qemu-x86-sigrok"
LEVELS = {"A0": 10.0, "A1": 6.31, "A2": 5.0, "A3": 5.0}   # rectified means of the demo patterns


def _device_type() -> DeviceType:
    return load_device_types(devlab.DEVICE_TYPES)[DTYPE]


def _expected_mw(dtype: DeviceType) -> dict[str, float]:
    return {r.name: r.voltage * r.ampsPerVolt * LEVELS[r.channel] * 1000 for r in dtype.rails}


def test_labgrid_sigrok_driver_measures_the_demo_device_the_place_carries(lab):
    c = Coordinator.from_settings(Settings.from_env(), address=lab["LG_COORDINATOR"], user="pytest", host="stacktest")
    try:
        resources = c.places()[PLACE].resources
    finally:
        c.close()
    assert {k: v for k, v in resources["SigrokDevice"].items() if k != "extra"} == {
        "driver": "demo"}, resources
    dtype = _device_type()
    target = Target(PLACE)
    monitor = SigrokRailMonitor.for_place(dtype, resources, target)
    try:
        for rail in dtype.rails:
            driver = monitor.drivers[rail.name]
            assert type(driver) is SigrokDriver and isinstance(driver.sigrok, SigrokDevice)
            assert (driver.sigrok.driver, driver.sigrok.channels) == ("demo", rail.channel)
        readings = [monitor.read() for _ in range(3)]
    finally:
        target.deactivate_all_drivers()
    expected = _expected_mw(dtype)
    for reading in readings:
        assert set(reading) == set(expected)
        for rail in dtype.rails:
            volts, mw = reading[rail.name]
            assert volts == rail.voltage
            assert mw == pytest.approx(expected[rail.name], rel=0.03), (rail.name, reading)
    square = next(r.name for r in dtype.rails if r.channel == "A0")
    assert {r[square][1] for r in readings} == {round(expected[square], 4)}


def test_low_power_run_on_sigrok_rails_succeeds(custom):
    name = unique("lpsig")
    for doc in _example("low-power.yaml", name, selector={"deviceType": DTYPE}):
        apply(doc)
    st = finished(custom, name, timeout=600)
    assert cond(st)["status"] == "True", st
    assert st["board"] == PLACE
    doc = _metrics(custom, name)
    values = {(s["step"], s["name"]): s["values"] for s in doc["series"]}
    expected = _expected_mw(_device_type())
    for step in ("deep-sleep", "s2idle"):
        for rail, mw in expected.items():
            for mode in ("active", step):
                got = values[(step, f"rail-{rail}-{mode}")]
                assert got[0] == pytest.approx(mw, rel=0.03), (step, rail, mode, got)
        evidence = doc["evidence"][f"{step}/1"]
        assert evidence["kernelEnter"] and evidence["kernelExit"], evidence
        assert evidence["statesSeen"] == [] and "qmpEvents" not in evidence   # not the virtual
        assert evidence["samples"] >= 4, evidence
