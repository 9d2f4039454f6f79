"""Rail summaries, the hwmon monitor on a sysfs tree, and the seed-style rail table."""

from __future__ import annotations

import pytest

from benchfarm.core import power
from benchfarm.errors import InfraError
from benchfarm.lab.rails import HwmonRailMonitor, VirtualRailMonitor
from benchfarm.report.shapes import Table, shape
from benchfarm.report.tables import rst


def test_summaries_and_window():
    readings = [(float(t), {"vdd_core": (0.75, 4.0 + t % 2), "vdd_rtc": (0.74, 0.01)})
                for t in range(10)]
    inside = power.window(readings, 2.0, 5.0)
    assert [r[0] for r in inside] == [2.0, 3.0, 4.0, 5.0]
    core, rtc = power.summarize_rails(inside, ["vdd_core", "vdd_rtc"])
    assert (core.mean_mw, core.min_mw, core.max_mw, core.samples) == (4.5, 4.0, 5.0, 4)
    assert power.total([core, rtc]) == 4.51
    names = {m.name: m.value for m in power.metrics("deep-sleep", [core, rtc])}
    assert names["rail-total-deep-sleep"] == 4.51 and names["rail-vdd_core-deep-sleep-voltage"] == 0.75
    with pytest.raises(ValueError):
        power.summarize_rails([], ["vdd_core"])


def test_hwmon_monitor_reads_power_or_voltage_times_current(tmp_path):
    ina0 = tmp_path / "hwmon3"
    ina0.mkdir()
    (ina0 / "in1_input").write_text("750\n")       # mV
    (ina0 / "power1_input").write_text("4880\n")   # µW
    ina1 = tmp_path / "hwmon4"
    ina1.mkdir()
    (ina1 / "in2_input").write_text("1800\n")
    (ina1 / "curr2_input").write_text("2\n")       # mA, no power file
    mon = HwmonRailMonitor(tmp_path, {"vdd_core": "hwmon3", "soc_dvdd_1v8": "hwmon4/2"})
    assert mon.read() == {"vdd_core": (0.75, 4.88), "soc_dvdd_1v8": (1.8, 3.6)}
    with pytest.raises(InfraError):
        HwmonRailMonitor(tmp_path, {"x": "hwmon9"}).read()


def test_virtual_monitor_sits_beside_the_pdu():
    mon = VirtualRailMonitor.for_power_port(
        {"host": "http://127.0.0.1:21080/outlet/{index}/{value}", "index": 2})
    assert mon.url == "http://127.0.0.1:21080/rails/2"


def test_rail_table_in_the_guide_layout():
    doc = {"run": {"board": "b"}, "series": [
        {"step": "lp", "name": "rail-vdd_core-deep-sleep", "unit": "mW", "values": [4.88],
         "display": "4.88"},
        {"step": "lp", "name": "rail-vdd_core-deep-sleep-voltage", "unit": "V", "values": [0.75],
         "display": "0.75"},
        {"step": "lp", "name": "rail-total-deep-sleep", "unit": "mW", "values": [11.04],
         "display": "11.04"}]}
    assert shape(doc).tables == [Table("lp", "deep-sleep Power Performance",
                                       ["Rail name", "Rail voltage(V)", "Power (mW)"],
                                       [["vdd_core", "0.75", "4.88"], ["Total", "", "11.04"]])]
    text = rst(doc)
    assert '.. csv-table:: deep-sleep Power Performance' in text
    assert ':header: "Rail name","Rail voltage(V)","Power (mW)"' in text
    assert '"vdd_core","0.75","4.88"' in text and '"Total","","11.04"' in text
