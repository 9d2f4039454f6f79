"""Suite steps' checkpoints as a session writes them with conditions (api.conditions models: a
snapshot before, during and after, the rails' power, valid or why not, the retaken attempts), for
the tests of what the results, the reports and the dashboard make of them."""

from __future__ import annotations

from typing import Any

from benchfarm.api.conditions import (
    CpuPolicy,
    RailEnergy,
    Snapshot,
    StepConditions,
    StepPower,
    ThermalZone,
)
from benchfarm.api.devicetype import BootSpec, ConditionsSource, DeviceType
from benchfarm.api.runs import SuiteSpec
from benchfarm.core import steps as st
from benchfarm.core.statistics.results import SuiteRecord
from benchfarm.suites.base import Metric

T0 = 1_800_000_000.0            # the first power-on, host wall seconds
DTYPE = DeviceType(name="vt", labgrid="vt.labgrid.yaml", boot=BootSpec(),
                   conditions=ConditionsSource(root="/run/benchfarm/sys", simulated=True))
SUITES = [SuiteSpec(name="cpu", suite="sysbench", command="sysbench cpu run")]
RUN = {"namespace": "ns", "name": "r", "board": "vb-0", "deviceType": "vt"}
THROTTLED = "cpufreq policy0 at 600 MHz, below the envelope's 1000 MHz (by 400 MHz)"


def snapshot(t: float, mhz: float = 1000.0, temp: float = 45.0, busy: float | None = 0.02,
             throttled: int = 0, governor: str = "performance") -> Snapshot:
    return Snapshot(t=t, cpufreq={"policy0": CpuPolicy(curKHz=int(mhz * 1000), minKHz=200_000,
                                                       maxKHz=1_000_000, governor=governor)},
                    thermal={"thermal_zone0": ThermalZone(type="cpu-thermal", tempC=temp)},
                    throttle={"cpu0-throttle": throttled}, load1=0.1, busy=busy,
                    memAvailableKiB=100_000)


def conditions(t: float, *, mhz: float = 1000.0, temp: float = 45.0, watts: float = 2.0,
               invalid: tuple[str, ...] = (), retake: int = 0, throttled: int = 0,
               governor: str = "performance", simulated: bool = True) -> dict[str, Any]:
    """A two-second step starting at `t`: before, one during, after; 2 W through it."""
    return StepConditions(
        before=snapshot(t, 1000.0, temp, governor=governor),
        during=[snapshot(t + 1, mhz, temp + 5, None, governor=governor)],
        after=snapshot(t + 2, mhz, temp + 7, None, throttled, governor=governor),
        power=StepPower(seconds=2.0, energyJ=watts * 2, averageW=watts,
                        rails={"vdd_core": RailEnergy(energyJ=watts * 1.5, averageW=watts * 0.75),
                               "vdd_ddr": RailEnergy(energyJ=watts * 0.5, averageW=watts * 0.25)},
                        samples=[(t, watts * 900), (t + 1, watts * 1100), (t + 2, watts * 1000)]),
        waitedSeconds=0.5, valid=not invalid, invalid=list(invalid), retake=retake,
        simulated=simulated).model_dump(mode="json")


def record(step: str, iteration: int, value: float, cond: dict[str, Any] | None, *,
           artifact: str | None = None, warmup: bool = False, suite: str = "sysbench"
           ) -> dict[str, Any]:
    watts = (cond or {}).get("power", {}).get("averageW", 2.0) if cond else None
    metrics = [Metric("sysbench-cpu-events", value, "events/s", True)]
    if watts:                   # the session's energy metrics (core.readings.power)
        metrics += [Metric("energy", watts * 2, "J", False),
                    Metric("average-power", watts, "W", False),
                    Metric("sysbench-cpu-events-per-watt", value / watts, "events/s/W", True)]
    return SuiteRecord(step=step, suite=suite, iteration=iteration, warmup=warmup, exit_code=0,
                       seconds=2.0, metrics=metrics,
                       artifact=artifact or f"raw/{step}-{iteration}.out",
                       conditions=cond).as_dict()


def suite_checkpoint(step: str, iteration: int, value: float, t: float, *,
                     invalid_attempts: int = 0, last_invalid: bool = False, side: str = "",
                     reason: str = THROTTLED) -> dict[str, Any]:
    """One iteration's checkpoint: `invalid_attempts` retaken attempts (throttled to 600 MHz),
    then the last (valid, or invalid too when `last_invalid`)."""
    retaken = [record(step, iteration, value / 2, conditions(
        t + 10 * n, mhz=600.0, invalid=(reason,), retake=n, throttled=4),
        artifact=f"raw/{step}-{iteration}-retake-{n}.out") for n in range(invalid_attempts)]
    last_t = t + 10 * invalid_attempts
    last = conditions(last_t, mhz=600.0 if last_invalid else 1000.0,
                      invalid=(reason,) if last_invalid else (), retake=invalid_attempts)
    return {"kind": st.SUITE, "side": side, "record": record(step, iteration, value, last),
            "evidence": None, "retaken": retaken}


def boot_checkpoint(n: int, side: str = "") -> dict[str, Any]:
    events = {"first-byte": 0.4, "kernel": 1.5, "init": 3.0, "prompt": 4.0}
    return {"kind": st.BOOT, "side": side, "phases": dict(events), "events": events,
            "powerOnWall": T0 + 100 * (n - 1)}
