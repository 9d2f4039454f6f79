"""The virtual boards' stand-in for cpufreq, thermal zones and throttling (issue 56;
exporters/virtual/sensors.py): the model's temperature curve, its throttle window and counters,
the lines it sends, the board image's loop that writes them (the real script, under busybox, on
a pty standing in for the virtio-serial port), the real slowdown of a throttled process, the
control socket's routes, and the virtual device types' envelopes against the model."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import time
import tty
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
VIRTUAL = REPO / "exporters" / "virtual"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, VIRTUAL / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module      # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


sensors = _load("sensors")
POLICY = "devices/system/cpu/cpufreq/policy0"
ZONE = "class/thermal/thermal_zone0"
COOLING = "class/thermal/cooling_device0"


def test_the_temperature_follows_the_power_with_its_time_constant():
    model = sensors.SensorModel(1_000_000)
    model.step(0.0, 1000.0)
    assert model.temp_c == sensors.AMBIENT_C              # the first step only starts the clock
    model.step(sensors.TAU_SECONDS, 1000.0)
    target = sensors.AMBIENT_C + sensors.C_PER_W * 1.0
    assert model.temp_c == pytest.approx(sensors.AMBIENT_C + (target - sensors.AMBIENT_C)
                                         * (1 - math.exp(-1)))
    for t in range(31, 400):                               # one-second ticks converge
        model.step(float(t), 1000.0)
    assert model.temp_c == pytest.approx(target, abs=0.01)
    model.step(400.0 + 10 * sensors.TAU_SECONDS, 0.0)      # off: back to ambient
    assert model.temp_c == pytest.approx(sensors.AMBIENT_C, abs=0.01)
    model.step(399.0, 5000.0)                              # a clock going back changes nothing
    assert model.temp_c == pytest.approx(sensors.AMBIENT_C, abs=0.01)


def test_a_throttle_window_lowers_the_frequency_and_counts_each_change():
    model = sensors.SensorModel(1_400_000, cpus=4)
    tree = model.tree(0.0)
    assert tree[f"{POLICY}/scaling_cur_freq"] == "1400000"
    assert tree[f"{POLICY}/cpuinfo_max_freq"] == "1400000"
    assert tree[f"{POLICY}/scaling_min_freq"] == "280000"
    assert tree[f"{POLICY}/scaling_governor"] == "performance"
    assert tree[f"{POLICY}/affected_cpus"] == "0 1 2 3"
    assert tree[f"{ZONE}/type"] == "cpu-thermal" and tree[f"{ZONE}/temp"] == "35000"
    assert tree[f"{COOLING}/stats/total_trans"] == "0" and tree[f"{COOLING}/cur_state"] == "0"
    model.throttle(10.0, 5.0, 700_000)
    assert model.throttled(10.0) and model.cur_khz(14.9) == 700_000
    tree = model.tree(12.0)
    assert tree[f"{POLICY}/scaling_cur_freq"] == "700000"
    assert tree[f"{COOLING}/cur_state"] == "5"            # half the clock: half the states
    assert tree[f"{COOLING}/stats/total_trans"] == "1"
    assert tree[f"{POLICY}/stats/total_trans"] == "1"
    assert model.state(12.0)["throttleSecondsLeft"] == 3.0
    tree = model.tree(15.0)                                # the window is over
    assert tree[f"{POLICY}/scaling_cur_freq"] == "1400000" and not model.throttled(15.0)
    assert tree[f"{COOLING}/cur_state"] == "0"
    assert tree[f"{COOLING}/stats/total_trans"] == "2"    # into it and out of it, as Linux counts
    model.throttle(20.0, 60.0, 1)                          # clamped to the policy's minimum
    assert model.cur_khz(21.0) == 280_000 and model.state(21.0)["coolingState"] == 8
    model.throttle(22.0, 0, 280_000)                       # 0 seconds ends it
    assert not model.throttled(22.0) and model.cooling_transitions == 4
    model.throttle(23.0, 5.0, 9_999_999)                   # at (or above) the maximum: no event
    assert not model.throttled(23.0) and model.cooling_transitions == 4
    model.booted()                                         # a power-on: the kernel counts anew
    tree = model.tree(24.0)
    assert tree[f"{COOLING}/stats/total_trans"] == "0" == tree[f"{POLICY}/stats/total_trans"]


def test_above_its_trip_the_board_throttles_by_itself_until_it_cooled_past_the_hysteresis():
    model = sensors.SensorModel(1_000_000, trip_c=50.0)
    t = 0.0
    while not model.tripped:
        t += 1
        model.step(t, 2000.0)                              # 75 °C would be its steady state
        assert t < 200
    assert model.temp_c >= 50.0 and model.cur_khz(t) == 500_000
    assert model.tree(t)[f"{ZONE}/trip_point_0_temp"] == "50000"
    while model.tripped:
        t += 1
        model.step(t, 0.0)
    assert model.temp_c < 50.0 - sensors.HYSTERESIS_C and model.cur_khz(t) == 1_000_000
    assert model.cooling_transitions == 2


def test_the_lines_sent_are_the_whole_tree_first_and_then_what_changed():
    model = sensors.SensorModel(1_000_000)
    first = model.tree(0.0)
    lines = sensors.changed_lines(first, {})
    assert len(lines) == len(first) and f"{POLICY}/scaling_cur_freq 1000000\n" in lines
    assert all(line.count(" ") >= 1 and line.endswith("\n") for line in lines)
    model.throttle(1.0, 10.0, 600_000)
    assert sensors.changed_lines(model.tree(1.0), first) == [
        f"{POLICY}/scaling_cur_freq 600000\n", f"{POLICY}/cpuinfo_cur_freq 600000\n",
        f"{POLICY}/stats/total_trans 1\n", f"{COOLING}/cur_state 4\n",
        f"{COOLING}/stats/total_trans 1\n"]
    assert sensors.changed_lines(model.tree(1.0), model.tree(1.0)) == []


def _until_exists(path: Path, timeout: float = 10) -> None:
    """Wait for the board's loop to have written `path` (the assertions after it say what)."""
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.mark.skipif(shutil.which("busybox") is None, reason="busybox (the image's shell)")
def test_the_boards_loop_writes_each_value_under_its_root_and_refuses_paths_out_of_it(tmp_path):
    image = _load("build_image")
    script = tmp_path / "benchfarm-sensors"
    script.write_text(image.SENSORS_SCRIPT)
    master, slave = os.openpty()            # the virtio-serial port: the lab writes, it reads
    tty.setraw(slave)
    root = tmp_path / "sys"
    loop = subprocess.Popen(["busybox", "sh", str(script), str(root), os.ttyname(slave)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        said = b""
        deadline = time.monotonic() + 10
        while b"hello\n" not in said and time.monotonic() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                said += os.read(master, 100)
        assert said.endswith(b"hello\n")          # opening the port, it asks for the tree
        assert (root / POLICY / "scaling_governor").read_text() == "performance\n"
        assert (root / ZONE / "type").read_text() == "cpu-thermal\n"
        tree = sensors.SensorModel(1_000_000).tree(0.0)
        os.write(master, "".join(sensors.changed_lines(tree, {})).encode())
        _until_exists(root / ZONE / "temp")
        assert not (tmp_path / "sensors-ready").exists()     # init waits for the whole tree
        os.write(master, b"ready\n")
        os.write(master, b"../escaped 1\nx/../../escaped 2\n/tmp/escaped 3\nx$(id) 4\n"
                         b"new/dir/file a b c\n")
        _until_exists(root / "new/dir/file")
        assert (root / POLICY / "scaling_cur_freq").read_text() == "1000000\n"
        assert (root / ZONE / "temp").read_text() == "35000\n"
        assert (root / POLICY / "affected_cpus").read_text() == "0\n"
        assert (root / "new/dir/file").read_text() == "a b c\n"
        assert (tmp_path / "sensors-ready").exists()
        assert not (tmp_path / "escaped").exists() and not (root.parent / "escaped").exists()
        assert sorted(p.name for p in root.iterdir()) == ["class", "devices", "new"]
    finally:
        loop.kill()
        loop.wait()
        os.close(master)
        os.close(slave)


class _Board:
    """A board's run state as the sensors ask for it, and a real process standing in for QEMU."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        self.run = "running"

    def status(self) -> tuple[str, int | None]:
        return self.run, (None if self.run == "off" else self.proc.pid)

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def state(self) -> str:
        return Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]

    def end(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _power() -> object:
    vlab = _load("vlab")
    return vlab.PowerModel(sensors.FALLBACK_RAILS)


def test_a_throttle_really_slows_the_process_in_proportion_and_lets_it_go_after():
    board = _Board()
    try:
        feed = sensors.BoardSensors("b0", sensors.SensorModel(1_000_000), _power(),
                                    "/nonexistent/sensors.sock", board.status)

        async def scenario() -> tuple[float, float, float]:
            feed.start()
            await asyncio.sleep(0.3)
            t0, cpu0 = time.monotonic(), board.cpu_seconds()
            feed.throttle(1.5, 250_000)
            await asyncio.sleep(1.5)
            throttled = (board.cpu_seconds() - cpu0) / (time.monotonic() - t0)
            await asyncio.sleep(0.3)
            assert feed.duty is not None and feed.duty.done() and feed.duty_fraction is None
            t1, cpu1 = time.monotonic(), board.cpu_seconds()
            await asyncio.sleep(0.5)
            after = (board.cpu_seconds() - cpu1) / (time.monotonic() - t1)
            return throttled, after, feed.model.state(time.monotonic())["coolingTransitions"]

        throttled, after, transitions = asyncio.run(scenario())
        assert 0.1 < throttled < 0.45, throttled        # a quarter of the time (one core)
        assert after > 0.8, after                       # running freely again
        assert board.state() in ("R", "S") and transitions == 2
    finally:
        board.end()


@pytest.mark.parametrize("end", ["off", "frozen"])
def test_the_duty_cycle_stops_when_the_board_goes_off_or_a_test_hook_froze_it(end):
    board = _Board()
    try:
        feed = sensors.BoardSensors("b0", sensors.SensorModel(1_000_000), _power(),
                                    "/nonexistent/sensors.sock", board.status)

        async def scenario() -> None:
            feed.start()
            feed.throttle(30, 500_000)
            await asyncio.sleep(0.5)
            assert feed.duty is not None and not feed.duty.done()
            if end == "frozen":
                os.kill(board.proc.pid, signal.SIGSTOP)  # as /chaos/<i>/hang does
            else:                                        # as the PDU's power-off does
                board.proc.kill()
                board.proc.wait()
            board.run = end
            if end == "off":
                feed.powered_off()
            await asyncio.sleep(0.3)
            assert feed.duty.done() and feed.duty_fraction is None

        asyncio.run(scenario())
        if end == "frozen":
            time.sleep(0.2)
            assert board.state() == "T"                  # the cycle did not wake it
    finally:
        board.end()


async def _get(path: str, control: Path) -> tuple[int, str]:
    reader, writer = await asyncio.open_unix_connection(str(control))
    writer.write(f"GET {path} HTTP/1.1\r\nHost: vlab\r\n\r\n".encode())
    await writer.drain()
    head, _, body = (await reader.read()).decode().partition("\r\n\r\n")
    writer.close()
    return int(head.split()[1]), body


def test_the_control_socket_reads_and_throttles_a_boards_sensors_and_its_power_port_does_not(
        tmp_path):
    vlab = _load("vlab")
    outlet = vlab.Outlet({"name": "b0", "rails": [], "qemu_argv": ["false"], "cpus": 2,
                          "qmp_socket": str(tmp_path / "qmp"),
                          "sensors": {"socket": str(tmp_path / "s.sock"), "maxKHz": 1_000_000}},
                         tmp_path)
    pdu = vlab.PDU([outlet])
    control = tmp_path / "control.sock"

    async def scenario() -> dict[str, tuple[int, str]]:
        board = await pdu.serve_board(0, 0)
        port = board.sockets[0].getsockname()[1]
        await pdu.serve_control(control)
        out = {path: await _get(path, control) for path in (
            "/sensors/0", "/sensors/0/throttle?seconds=5&khz=400000", "/sensors/0/throttle",
            "/sensors/0/throttle?seconds=-1&khz=1", "/sensors/1", "/sensors/0/heat")}
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /sensors/0/throttle?seconds=5&khz=1 HTTP/1.1\r\n\r\n")
        out["board"] = (int((await reader.read()).split()[1]), "")
        writer.close()
        return out

    got = asyncio.run(scenario())
    before = json.loads(got["/sensors/0"][1])
    assert before["power"] == "off" and before["curKHz"] == 1_000_000 and not before["throttled"]
    assert before["tree"][f"{POLICY}/scaling_max_freq"] == "1000000"
    after = json.loads(got["/sensors/0/throttle?seconds=5&khz=400000"][1])
    assert after["throttled"] and after["curKHz"] == 400_000 and after["coolingTransitions"] == 1
    for bad in ("/sensors/0/throttle", "/sensors/0/throttle?seconds=-1&khz=1",
                "/sensors/0/heat"):
        assert got[bad][0] == 400, (bad, got[bad])
    assert got["/sensors/1"][0] == 404
    assert got["board"][0] == 404 and outlet.sensors.model.cur_khz(time.monotonic()) == 400_000


def test_the_virtual_device_types_envelopes_fit_the_model():
    """Each virtual device type points its conditions at the stand-in, asks for the model's own
    maximum, and puts its temperature ceiling above what its board reaches unthrottled, flat out
    (every rail active), and below the model's trip."""
    from benchfarm.api.devicetype import DeviceType
    types = {p.name: yaml.safe_load(p.read_text()) for p in
             (REPO / "exporters" / "device-types").glob("*.yaml")
             if not p.name.endswith(".labgrid.yaml")}
    assert len(types) >= 6
    for name, raw in types.items():
        dtype = DeviceType.model_validate(raw)
        assert dtype.conditions is not None and dtype.conditions.simulated, name
        assert dtype.conditions.root == "/run/benchfarm/sys", name
        envelope = dtype.envelope
        assert envelope is not None and envelope.governor == "performance", name
        assert envelope.minFrequencyMHz == dtype.cpuClockMHz, name
        rails = sensors.heat_rails(raw.get("rails") or [])
        flat_out = sensors.AMBIENT_C + sensors.C_PER_W * sum(
            r["model"]["active"] for r in rails) / 1000 * 1.01
        assert flat_out + 5 < envelope.maxTemperatureC < sensors.TRIP_C, (name, flat_out)
        assert envelope.allowThrottling is False and envelope.retakes == 2, name
    simulated = yaml.safe_load((REPO / "exporters/simulated/sim-board.yaml").read_text())
    assert "conditions" not in simulated and "envelope" not in simulated
