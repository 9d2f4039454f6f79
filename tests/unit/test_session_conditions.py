"""A board session's suite step with conditions (lab.session.BoardSession.suite): its command
goes out wrapped and the parser sees the suite's own output; the record carries the snapshots,
the rails' energy and the energy metrics; a bounded envelope is waited for; a rail monitor that
cannot be built leaves the step without power, never failed. The board's shell is a real one
(busybox sh) on a sysfs-shaped tree; the rail monitor is a fake."""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from pathlib import Path

import pytest

from benchfarm.api.devicetype import DeviceType
from benchfarm.api.runs import SuiteSpec
from benchfarm.core.readings import conditions as probe
from benchfarm.lab import session as lab_session
from benchfarm.lab.board import CommandResult
from benchfarm.lab.session import BoardSession
from benchfarm.suites.base import Metric
from tests.unit.test_conditions_probe import tree


class Shell:
    """The board's console: each command in its own busybox sh, as labgrid's `run` does."""

    def __init__(self) -> None:
        self.commands: list[str] = []

    def run(self, command: str, timeout: float) -> CommandResult:
        self.commands.append(command)
        start = time.monotonic()
        time.sleep(0.03)      # a prompt cycle: the board's clock (10 ms ticks) moves on
        p = subprocess.run(["busybox", "sh", "-c", command], capture_output=True, text=True,
                           timeout=timeout)
        out = p.stdout[:-1] if p.stdout.endswith("\n") else p.stdout
        return CommandResult(command, out, p.returncode, time.monotonic() - start)


class Rails:
    def read(self) -> dict[str, tuple[float, float]]:
        return {"vdd_core": (0.75, 600.0), "vdd_ddr": (1.1, 400.0)}

    def state(self) -> str | None:
        return "running"


RAILS = Rails()


def session(root, *, envelope: dict | None = None, monitor=RAILS) -> BoardSession:
    dt = DeviceType(name="vt", labgrid="vt.labgrid.yaml", boot={},
                    conditions={"root": str(root), "intervalSeconds": 0.2,
                                "powerSampleHz": 10, "simulated": True},
                    envelope=envelope, powerMonitor={"backend": "virtual"},
                    rails=[{"name": "vdd_core", "voltage": 0.75},
                           {"name": "vdd_ddr", "voltage": 1.1}])
    s = BoardSession.__new__(BoardSession)
    s.place, s.resources, s.device_type, s.environment = "vt-0", {}, dt, {}
    s.cancelled, s.deadline = threading.Event(), time.monotonic() + 120
    s.board = Shell()
    s.monitor, s.monitor_problem, s.last_mark, s.last_seen = monitor, None, None, None
    s.probe_ready, s.probe_tries = False, 0
    return s


def parse(suite: str, output: str, params: dict) -> list[Metric]:
    assert output == "events per second: 1200"        # the suite's own, unwrapped
    return [Metric("sysbench-cpu-events", 1200.0, "events/s", True)]


SPEC = SuiteSpec(name="cpu", suite="sysbench", command="sleep 1; echo 'events per second: 1200'")


@pytest.fixture(autouse=True)
def _scripts():
    """The probe scripts the test's sessions write (to the host's /tmp: its board) removed."""
    before = set(Path("/tmp").glob("bfc-*.sh"))
    yield
    for path in set(Path("/tmp").glob("bfc-*.sh")) - before:
        path.unlink(missing_ok=True)


def test_a_suite_step_records_its_conditions_energy_and_energy_metrics(tmp_path):
    s = session(tree(tmp_path))
    s.suite(SPEC, 1, False, parse)
    assert s.board.commands[:-1] == [probe.install(s.device_type.conditions)]  # once a boot
    record, output, _ = s.suite(SPEC, 2, False, parse, retake=1)
    assert output == "events per second: 1200" and record.ok
    assert len(s.board.commands) == 3                  # one console command a step, no more
    cond = record.conditions
    assert cond["before"]["cpufreq"]["policy0"]["curKHz"] == 1000000
    assert 3 <= len(cond["during"]) <= 6 and cond["after"] is not None
    assert cond["simulated"] is True and cond["retake"] == 1 and cond["waitedSeconds"] == 0
    power = cond["power"]
    assert power["averageW"] == 1.0 and power["energyJ"] == pytest.approx(
        record.seconds, rel=0.2) and set(power["rails"]) == {"vdd_core", "vdd_ddr"}
    names = {m.name: m for m in record.metrics}
    assert names["average-power"].value == 1.0 and names["energy"].unit == "J"
    assert names["sysbench-cpu-events-per-watt"].value == 1200.0
    assert s.last_mark is not None


def test_a_bounded_envelope_is_waited_for_then_settled(tmp_path, monkeypatch):
    monkeypatch.setattr(lab_session, "POLL_SECONDS", 0.2)
    root = tree(tmp_path, temp=70000)
    s = session(root, envelope={"maxTemperatureC": 60, "waitSeconds": 10,
                                "settleSeconds": 0.3})
    cool = threading.Timer(0.6, lambda: (root / "class/thermal/thermal_zone0/temp")
                           .write_text("50000\n"))
    cool.start()
    record, _, _ = s.suite(SPEC, 1, False, parse, envelope=s.device_type.envelope)
    cool.join()
    waited = record.conditions["waitedSeconds"]
    assert 0.8 <= waited < 5 and len(s.board.commands) >= 3       # polls, then the suite
    assert record.conditions["before"]["thermal"]["thermal_zone0"]["tempC"] == 50.0


def test_an_envelope_never_reached_is_waited_for_at_most_its_wait(tmp_path, monkeypatch):
    monkeypatch.setattr(lab_session, "POLL_SECONDS", 0.2)
    s = session(tree(tmp_path, temp=90000), envelope={"maxTemperatureC": 60, "waitSeconds": 1})
    record, _, _ = s.suite(SPEC, 1, False, parse, envelope=s.device_type.envelope)
    assert 1.0 <= record.conditions["waitedSeconds"] < 2.5 and record.ok


QUIET = {"maxTemperatureC": 60, "maxBusyBefore": 1.0, "waitSeconds": 10}   # busy always in


def test_the_first_step_after_a_boot_takes_the_installs_snapshot_for_its_look(tmp_path):
    """The provenance probes print the mark busy is counted from, and the probe's install a
    snapshot: that is the first step's look (no look of its own, none a poll later)."""
    s = session(tree(tmp_path), envelope=QUIET)
    prov = s.provenance([SPEC])
    assert s.last_mark is not None and "@bfs" not in str(prov) and prov["cpus"].isdigit()
    record, _, _ = s.suite(SPEC, 1, False, parse, envelope=s.device_type.envelope)
    assert len(s.board.commands) == 3                       # provenance, the install, the suite
    assert s.board.commands[1] == probe.install(s.device_type.conditions)
    assert record.conditions["waitedSeconds"] < lab_session.POLL_SECONDS
    assert record.conditions["before"]["busy"] is not None


def test_without_a_mark_the_first_look_waits_a_poll_for_busy(tmp_path, monkeypatch):
    monkeypatch.setattr(lab_session, "POLL_SECONDS", 0.3)
    s = session(tree(tmp_path), envelope=QUIET)
    record, _, _ = s.suite(SPEC, 1, False, parse, envelope=s.device_type.envelope)
    assert len(s.board.commands) == 3                       # the install, one look, the suite
    assert s.board.commands[0] == probe.install(s.device_type.conditions)
    assert 0.3 <= record.conditions["waitedSeconds"] < 2


def test_a_board_still_inside_is_not_looked_at_again_but_a_retake_always_is(tmp_path):
    root = tree(tmp_path)
    s = session(root, envelope=QUIET)
    envelope = s.device_type.envelope
    s.suite(SPEC, 1, False, parse, envelope=envelope)
    before = len(s.board.commands)
    record, _, _ = s.suite(SPEC, 2, False, parse, envelope=envelope)
    assert len(s.board.commands) == before + 1 and record.conditions["waitedSeconds"] == 0
    s.suite(SPEC, 2, False, parse, envelope=envelope, retake=1)
    assert len(s.board.commands) == before + 3              # a look, then the suite
    # the last step ended hot: the next one looks (and waits it out)
    (root / "class/thermal/thermal_zone0/temp").write_text("70000\n")
    s.suite(SPEC, 3, False, parse, envelope=envelope)
    (root / "class/thermal/thermal_zone0/temp").write_text("50000\n")
    count = len(s.board.commands)
    record, _, _ = s.suite(SPEC, 4, False, parse, envelope=envelope)
    assert len(s.board.commands) == count + 2
    assert record.conditions["before"]["thermal"]["thermal_zone0"]["tempC"] == 50.0


def test_a_board_busy_before_its_last_step_is_looked_at_before_the_next(tmp_path):
    s = session(tree(tmp_path), envelope={**QUIET, "maxBusyBefore": 0.5})
    envelope = s.device_type.envelope
    s.suite(SPEC, 1, False, parse, envelope=envelope)
    assert s.last_seen is not None
    s.last_seen = lab_session.Seen(s.last_seen.snapshot, s.last_seen.at, idle=False)
    count = len(s.board.commands)
    s.suite(SPEC, 2, False, parse, envelope=envelope)
    assert len(s.board.commands) >= count + 2                # at least one look first
    # and a stale word is no word: looked at again
    s.last_seen = lab_session.Seen(s.last_seen.snapshot, time.monotonic()
                                   - lab_session.FRESH_SECONDS - 1, idle=True)
    count = len(s.board.commands)
    s.suite(SPEC, 3, False, parse, envelope=envelope)
    assert len(s.board.commands) >= count + 2


def test_a_rail_monitor_that_cannot_be_built_leaves_the_step_without_power(
        tmp_path, monkeypatch, caplog):
    def broken(*_):
        raise OSError("no route to the monitor")
    monkeypatch.setattr(lab_session, "monitor_for", broken)
    s = session(tree(tmp_path), monitor=None)
    with caplog.at_level(logging.WARNING):
        record, _, _ = s.suite(SPEC, 1, False, parse)
        s.suite(SPEC, 2, False, parse)
    assert record.ok and record.conditions["power"] is None
    assert [m.name for m in record.metrics] == ["sysbench-cpu-events"]
    assert sum("rails not sampled" in r.message for r in caplog.records) == 1   # said once
