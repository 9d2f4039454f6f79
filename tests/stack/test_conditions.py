"""Issue 56 on the real stack: a run on a virtual board records, around every suite step, what
the board was measured under (its cpufreq, thermal zone and cooling device, the stand-in the lab
drives) and its energy; the lab throttles the board while iteration 2's suite runs: that
measurement is invalid (the frequency below the envelope, the cooling device counting), kept with
its raw output, measured again (valid), and left out of the statistics, which hold three valid
values; metrics.json has conditions and energy for every step of every iteration."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import benchfarm_devlab as devlab
from tests.stack.conftest import apply, wait_for
from tests.stack.runs import cond, finished, get, run_yaml, status, unique
from tests.stack.test_operator import custom  # noqa: F401
from tests.stack.test_suites_stack import _store

pytestmark = pytest.mark.stack

# the line the suite prints when it starts (its command, echoed on the console, does not hold
# it): the test counts them in the session's serial log to throttle iteration 2 mid-suite
STARTED = "suite started-now"
PLAN = """
apiVersion: benchfarm.io/v1alpha1
kind: TestPlan
metadata: {name: stacktest-conditions}
spec:
  # a plan's own envelope, looser than the device type's 70 °C (the stricter holds): its suites
  # are signed with it, and the session must verify them after the API server's round trip
  envelope: {maxTemperatureC: 90.0}
  suites:
    - name: cpu
      suite: sysbench
      timeoutSeconds: 120
      command: "printf 'suite %s\\\\n' started-now; sysbench cpu --threads=1 --time=6 run"
"""
MAX_KHZ = 1_000_000          # qemu-x86's cpuClockMHz: the sensor model's maximum


def _serial_log(uid: str) -> Path | None:
    spool = Path(devlab.lab_env()["BENCHFARM_STATE"]) / "spool" / uid
    logs = sorted(spool.glob("**/serial/attempt-*-run-*.log"))
    return logs[-1] if logs else None


def _started(uid: str) -> int:
    path = _serial_log(uid)
    return path.read_bytes().count(STARTED.encode()) if path is not None else 0


def test_a_throttled_iteration_is_retaken_and_every_step_has_conditions_and_energy(custom):  # noqa: F811
    apply(PLAN)
    name = unique("conditions")
    apply(run_yaml(name, plan="stacktest-conditions", iterations=3, timeoutSeconds=1200))
    uid = get(custom, name)["metadata"]["uid"]
    board = wait_for("a board for the run", lambda: status(custom, name).get("board"),
                     timeout=600)
    wait_for("iteration 2's suite started", lambda: _started(uid) >= 2, timeout=900, every=0.2)
    time.sleep(0.5)
    thrown = devlab.throttle(board, 3, MAX_KHZ // 4)       # 3 s of the suite's 6, at 1/4
    assert thrown["throttled"], thrown
    st = finished(custom, name, timeout=900)
    assert cond(st)["status"] == "True", st
    store = _store()
    prefix = st["storePrefix"]
    doc = json.loads(store.get(f"{prefix}/metrics.json"))
    records = [r for r in doc["records"] if r["step"] == "cpu"]
    assert [r["iteration"] for r in records] == [1, 2, 3]
    (retaken,) = doc["retaken"]
    assert retaken["iteration"] == 2 and retaken["conditions"]["valid"] is False
    reasons = " ".join(retaken["conditions"]["invalid"])
    assert "policy0 at 250 MHz, below the envelope's 1000 MHz (during" in reasons, reasons
    assert "throttled: cooling_device0 counted" in reasons, reasons
    raw = store.get(retaken["artifact"].split("/", 3)[3]).decode()
    assert "events per second:" in raw                     # the invalid attempt's own output
    second = records[1]
    assert second["conditions"]["valid"] and second["conditions"]["retake"] == 1
    assert second["artifact"].endswith("iteration-002-retake-1.txt")
    (events,) = [s for s in doc["series"] if s["step"] == "cpu" and
                 s["name"] == "sysbench-cpu-events"]
    assert len(events["values"]) == 3
    assert events["values"] == [next(m["value"] for m in r["metrics"]
                                     if m["name"] == "sysbench-cpu-events") for r in records]
    for r in [*records, retaken]:
        c = r["conditions"]
        assert c["simulated"] and c["before"] and c["after"] and c["during"], r["iteration"]
        assert c["before"]["cpufreq"]["policy0"]["governor"] == "performance"
        assert c["power"]["energyJ"] > 0 and c["power"]["averageW"] > 0, c["power"]
        names = {m["name"] for m in r["metrics"]}
        assert {"energy", "average-power", "sysbench-cpu-events-per-watt"} <= names, names
    for r in records:
        assert r["conditions"]["invalid"] == []
        assert all(s["cpufreq"]["policy0"]["curKHz"] == MAX_KHZ
                   for s in r["conditions"]["during"]), r["iteration"]
