"""Rail monitors: one interface, a backend per kind of instrument.

- `virtual`: the virtual lab's monitor, next to its PDU, serving readings from the board's power
  model (which follows the real QEMU state over QMP);
- `hwmon`: INA2xx (or any hwmon power/voltage sensor) read through sysfs on the monitor host;
- `sigrok`: bench supplies driven by sigrok through labgrid's SigrokPowerDriver, one per rail.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Protocol

from ..api.devicetype import DeviceType
from ..core.power import Reading
from ..errors import InfraError


class RailMonitor(Protocol):
    def read(self) -> dict[str, tuple[float, float]]: ...   # rail -> (volts, mW)

    def state(self) -> str | None: ...                        # what the board is doing, if known


class VirtualRailMonitor:
    def __init__(self, url: str) -> None:
        self.url = url
        self.last: dict[str, Any] = {}

    @classmethod
    def for_power_port(cls, power_port: dict[str, Any]) -> VirtualRailMonitor:
        """The monitor sits beside the virtual PDU: /outlet/<i>/<v> -> /rails/<i>."""
        host = str(power_port["host"])
        base = host.split("/outlet/")[0]
        return cls(f"{base}/rails/{power_port['index']}")

    def _get(self, url: str) -> dict[str, Any]:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return json.loads(resp.read())
        except (OSError, ValueError) as exc:
            raise InfraError(f"rail monitor {url} unreadable: {exc}", reason="MonitorFailed") from exc

    def read(self) -> dict[str, tuple[float, float]]:
        self.last = self._get(self.url)
        return {name: (r["voltage"], r["power_mW"]) for name, r in self.last["rails"].items()}

    def state(self) -> str | None:
        return self.last.get("state")

    def qmp(self) -> dict[str, Any]:
        return self._get(self.url.replace("/rails/", "/qmp/"))


class HwmonRailMonitor:
    """Rails on hwmon sensors: a rail's `channel` is '<hwmon dir name>' or '<dir>/<index>'.

    Power comes from power<N>_input (µW) when the sensor has it, else in<N>_input (mV) times
    curr<N>_input (mA), as the INA2xx drivers expose them.
    """

    def __init__(self, root: Path, rails: dict[str, str]) -> None:
        self.root = root
        self.rails = rails

    def _value(self, path: Path) -> float | None:
        try:
            return float(path.read_text().strip())
        except (OSError, ValueError):
            return None

    def read(self) -> dict[str, tuple[float, float]]:
        out = {}
        for rail, channel in self.rails.items():
            name, _, index = channel.partition("/")
            base = self.root / name
            n = index or "1"
            mv = self._value(base / f"in{n}_input")
            uw = self._value(base / f"power{n}_input")
            ma = self._value(base / f"curr{n}_input")
            if mv is None or (uw is None and ma is None):
                raise InfraError(f"hwmon channel {channel} of rail {rail} unreadable under "
                                 f"{self.root}", reason="MonitorFailed")
            mw = uw / 1000 if uw is not None else mv * ma / 1000
            out[rail] = (round(mv / 1000, 4), round(mw, 4))
        return out

    def state(self) -> str | None:
        return None


class SigrokRailMonitor:
    """One labgrid SigrokPowerDriver per rail (resources named after the rails)."""

    def __init__(self, drivers: dict[str, Any]) -> None:
        self.drivers = drivers

    def read(self) -> dict[str, tuple[float, float]]:
        out = {}
        for rail, driver in self.drivers.items():
            try:
                m = driver.measure()
            except Exception as exc:
                raise InfraError(f"sigrok rail {rail}: {exc}", reason="MonitorFailed") from exc
            out[rail] = (m["voltage"], m["voltage"] * m["current"] * 1000)
        return out

    def state(self) -> str | None:
        return None


def monitor_for(device_type: DeviceType, resources: dict[str, dict[str, Any]],
                target: Any = None) -> RailMonitor:
    cfg = device_type.powerMonitor
    if cfg is None or not device_type.rails:
        raise InfraError(f"device type {device_type.name} has no rail monitor", reason="NoMonitor")
    if cfg.backend == "virtual":
        return VirtualRailMonitor.for_power_port(resources["NetworkPowerPort"])
    if cfg.backend == "hwmon":
        return HwmonRailMonitor(Path(cfg.root), {r.name: r.channel for r in device_type.rails})
    if cfg.backend == "sigrok":
        from labgrid.driver import SigrokPowerDriver
        drivers = {r.name: SigrokPowerDriver(target, name=r.name) for r in device_type.rails}
        for d in drivers.values():
            target.activate(d)
        return SigrokRailMonitor(drivers)
    raise InfraError(f"unknown rail monitor backend {cfg.backend!r}", reason="NoMonitor")


class Sampler:
    """Reads a monitor at a fixed rate in a thread, keeping timestamped readings and states."""

    def __init__(self, monitor: RailMonitor, rate_hz: float) -> None:
        self.monitor = monitor
        self.period = 1.0 / max(0.1, rate_hz)
        self.readings: list[Reading] = []
        self.states: list[tuple[float, str | None]] = []
        self.error: Exception | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rail-sampler", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.monotonic()
            try:
                reading = self.monitor.read()
                self.readings.append((t, reading))
                self.states.append((t, self.monitor.state()))
            except Exception as exc:  # keep the first error; the suite reports it
                self.error = self.error or exc
            self._stop.wait(max(0.0, self.period - (time.monotonic() - t)))
