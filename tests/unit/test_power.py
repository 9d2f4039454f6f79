"""Rail summaries, the hwmon monitor on a sysfs tree, sigrok sense samples to mW and the sigrok
monitor's checks, and the seed-style rail table."""

from __future__ import annotations

import pytest
from labgrid import Target
from labgrid.driver.exception import ExecutionError
from labgrid.resource import NetworkPowerPort
from labgrid.util import proxy

from benchfarm.api.devicetype import DeviceType
from benchfarm.core.readings import power
from benchfarm.errors import InfraError
from benchfarm.lab.rails import HwmonRailMonitor, SigrokRailMonitor, VirtualRailMonitor, monitor_for
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


def _power_port(name: str, **extra) -> NetworkPowerPort:
    port = NetworkPowerPort(Target(name), name=None, model="simplerest", index="2",
                            host="http://127.0.0.1:21502/outlet/{index}/{value}")
    if extra:
        port.extra = extra       # as labgrid's RemotePlace sets what the exporter published
    return port


def test_virtual_monitor_sits_on_the_boards_power_switch():
    assert VirtualRailMonitor.for_power_port(_power_port("p-direct")).url == \
        "http://127.0.0.1:21502/rails/2"


def test_virtual_monitor_goes_through_the_exporter_hosts_ssh_like_labgrids_drivers(monkeypatch):
    """An `--isolated` exporter's power switch is read through a forward over its host's SSH,
    asked of labgrid's sshmanager as its NetworkPowerDriver asks it (SSH itself faked here)."""
    asked = []
    monkeypatch.setattr(proxy.sshmanager, "request_forward",
                        lambda host, dest, port: asked.append((host, dest, port)) or 40123)
    mon = VirtualRailMonitor.for_power_port(
        _power_port("p-proxied", proxy="vhost0", proxy_required=True))
    assert asked == [("vhost0", "127.0.0.1", 21502)]
    assert mon.url == "http://localhost:40123/rails/2"

    def refused(host, dest, port):
        raise ExecutionError("ssh: connect to host vhost0 port 22: Connection refused")
    monkeypatch.setattr(proxy.sshmanager, "request_forward", refused)
    with pytest.raises(InfraError, match="no way there") as exc:
        VirtualRailMonitor.for_power_port(_power_port("p-refused", proxy="vhost0",
                                                      proxy_required=True))
    assert exc.value.reason == "MonitorFailed"


def test_the_virtual_monitor_needs_the_places_power_switch():
    dtype = DeviceType(name="t", console={"prompt": "# "}, boot={},
                       powerMonitor={"backend": "virtual"}, rails=[{"name": "vdd", "voltage": 1}])
    with pytest.raises(InfraError, match="needs the place's one NetworkPowerPort") as exc:
        monitor_for(dtype, {"PDUDaemonPort": {}}, Target("p-none"))
    assert exc.value.reason == "NoMonitor"
    target = Target("p-one")
    NetworkPowerPort(target, name=None, model="simplerest", index="2",
                     host="http://127.0.0.1:21502/outlet/{index}/{value}")
    assert monitor_for(dtype, {"NetworkPowerPort": {}}, target).url == \
        "http://127.0.0.1:21502/rails/2"


def test_sense_samples_give_nominal_volts_and_milliwatts():
    # labgrid's SigrokDriver.stop() gives CSV strings; a sine around 0 V averages rectified
    assert power.sense_power(["0", "3.09017", "-3.09017", "0"], 0.75, 0.1) == (0.75, 115.8814)
    # a DC sense output (never negative): the plain mean; 2 V at 0.01 A/V on 1.8 V = 36 mW
    assert power.sense_power([1.5, 2.5], 1.8, 0.01) == (1.8, 36.0)
    assert power.sense_power(["-10", "10"], 1.1, 0.015) == (1.1, 165.0)
    with pytest.raises(ValueError):
        power.sense_power([], 1.8, 0.01)
    with pytest.raises(ValueError):
        power.sense_power(["A0: -10.00 V DC"], 1.8, 0.01)  # libsigrok 0.5.2's broken CSV


def _sigrok_type(**rail) -> DeviceType:
    return DeviceType(name="t", console={"prompt": "# "}, boot={},
                      powerMonitor={"backend": "sigrok"},
                      rails=[{"name": "vdd_core", "voltage": 0.75, **rail}])


def test_sigrok_monitor_needs_channels_transfer_and_the_place_device():
    with pytest.raises(InfraError, match="needs a channel and ampsPerVolt") as exc:
        SigrokRailMonitor.for_place(_sigrok_type(channel="A1"), {}, Target("p1"))
    assert exc.value.reason == "NoMonitor"
    with pytest.raises(InfraError, match=r"need a SigrokDevice in the place \(has NetworkSerial"):
        SigrokRailMonitor.for_place(_sigrok_type(channel="A1", ampsPerVolt=0.1),
                                    {"NetworkSerialPort": {}}, Target("p2"))


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
