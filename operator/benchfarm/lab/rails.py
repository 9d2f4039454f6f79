"""Rail monitors: one interface, a backend per kind of instrument.

- `virtual`: the virtual lab's monitor, on the board's own power switch, serving readings from
  the board's power model (which follows the real QEMU state over QMP), reached as labgrid's
  power driver reaches that switch: through the exporter host's SSH when the exporter says so;
- `hwmon`: INA2xx (or any hwmon power/voltage sensor) read through sysfs on the monitor host;
- `sigrok`: an instrument sigrok drives (a DAQ or scope on the rails' current-sense outputs),
  measured through labgrid's SigrokDriver; `SigrokRailMonitor` says what labgrid allows.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Protocol, cast

from benchfarm.api.devicetype import DeviceType, PowerMonitor, Rail
from benchfarm.api.outcomes import LabFault
from benchfarm.core.readings import power
from benchfarm.errors import InfraError

log = logging.getLogger(__name__)


class RailMonitor(Protocol):
    def read(self) -> dict[str, tuple[float, float]]: ...   # rail -> (volts, mW)

    def state(self) -> str | None: ...                        # what the board is doing, if known


class VirtualRailMonitor:
    def __init__(self, url: str) -> None:
        self.url = url
        self.last: dict[str, Any] = {}

    @classmethod
    def for_power_port(cls, power_port: Any) -> VirtualRailMonitor:
        """The monitor sits on the board's virtual power switch, a labgrid `NetworkPowerPort`
        (`http://host:port/outlet/<i>/<v>`): /rails/<i> there. Its host and port resolved as
        labgrid's NetworkPowerDriver resolves them (`proxymanager.get_host_and_port`): an
        `--isolated` exporter's resource (`extra.proxy_required`) through a forward over that
        exporter host's SSH, else directly."""
        from labgrid.driver.exception import ExecutionError
        from labgrid.util.proxy import proxymanager
        url = urllib.parse.urlsplit(str(power_port.host))
        if not url.hostname:
            raise InfraError(f"power switch {power_port.host!r}: no host to read rails from",
                             reason=LabFault.no_monitor)
        try:
            host, port = proxymanager.get_host_and_port(
                power_port, force_port=url.port or (443 if url.scheme == "https" else 80))
        except (ExecutionError, OSError) as exc:     # the exporter host's SSH did not forward
            raise InfraError(f"rail monitor beside {power_port.host}: no way there: "
                             f"{type(exc).__name__}: {exc}",
                             reason=LabFault.monitor_failed) from exc
        return cls(f"{url.scheme}://{host}:{port}/rails/{power_port.index}")

    def _get(self, url: str) -> dict[str, Any]:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                doc: dict[str, Any] = json.loads(resp.read())
                return doc
        except (OSError, ValueError) as exc:
            raise InfraError(f"rail monitor {url} unreadable: {exc}",
                             reason=LabFault.monitor_failed) from exc

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
                                 f"{self.root}", reason=LabFault.monitor_failed)
            mw = uw / 1000 if uw is not None else mv * (ma or 0.0) / 1000   # one of them is read
            out[rail] = (round(mv / 1000, 4), round(mw, 4))
        return out

    def state(self) -> str | None:
        return None


class SigrokRailMonitor:
    """Rails on the channels of the place's `SigrokDevice`, through labgrid's `SigrokDriver`.

    The place carries one `SigrokDevice` (its sigrok driver, e.g. `demo`; labgrid passes the
    string to `sigrok-cli -d` as it is, so a networked instrument's `conn=` can ride along);
    each rail's `channel` names the instrument channel wired to its current-sense output and
    `ampsPerVolt` the sense transfer. Every rail gets a
    `SigrokDevice` of its own (the place's, with `channels` set to the rail's channel) and a
    `SigrokDriver` bound to it by name; a reading captures each rail in turn for
    `captureSeconds` (`capture()` then `stop()`, the driver's CSV rows) and maps the samples to
    mW with `core.readings.power.sense_power`.

    What labgrid allows, and why this shape (labgrid 26.0.1, Debian 12's sigrok-cli 0.7.2 on
    libsigrok 0.5.2):
    - labgrid's exporter has no export for `SigrokDevice`: its `exports` table
      (labgrid/remote/exporter.py) maps only `SigrokUSBDevice` / `SigrokUSBSerialDevice` to
      `USBSigrokExport` (udev-matched USB devices, served as `NetworkSigrokUSB[Serial]Device`
      whose sigrok-cli runs on the exporter host over SSH). Any other class goes out as a plain
      `ResourceEntry` (`add_resource`: `exports.get(cls, ResourceEntry)`, always available)
      and the client builds a local `SigrokDevice` from it (no host, empty command prefix), so
      sigrok-cli runs where the session runs, which must reach the instrument (the demo
      device is software; a LAN instrument is reached by its `conn`).
    - `SigrokPowerDriver` (a bench supply's `--show` voltage/current) binds only
      `SigrokUSBSerialDevice` / `NetworkSigrokUSBSerialDevice`, and `SigrokDmmDriver` only the
      USB classes; neither binds a `SigrokDevice`, and the demo driver has no voltage or
      current keys to show, so neither can measure here.
    - One capture per rail, because libsigrok 0.5.2's CSV output, which `SigrokDriver.stop()`
      always converts to (`-O csv:time=true`), breaks on more than one analog channel: from run
      to run `sigrok-cli -C A0,A1 -i x.sr -O csv:time=true` dies with SIGSEGV or SIGABRT, or
      writes a header of uninitialised bytes (then `stop()` raises UnicodeDecodeError), stray
      `A0: -10.00 V DC` lines and zeroed columns. One analog channel converts cleanly. Rails in
      turn, not at once: a real instrument is opened by one sigrok-cli at a time.
    - The demo device's patterns (A0 square, A1 sine, A2 triangle, A3 sawtooth, A4 random,
      +-10 V) do not follow the board: a virtual board on it proves the path (place, labgrid
      driver, samples, mW), not its figures; asleep reads like active.
    """

    RESOURCE = "SigrokDevice"

    def __init__(self, drivers: dict[str, Any], rails: list[Rail], samplerate: str,
                 capture_s: float) -> None:
        self.drivers = drivers
        self.rails = rails
        self.samplerate = samplerate
        self.capture_s = capture_s
        self._dir = tempfile.TemporaryDirectory(prefix="benchfarm-sigrok-")

    @classmethod
    def for_place(cls, device_type: DeviceType, resources: dict[str, dict[str, Any]],
                  target: Any) -> SigrokRailMonitor:
        from labgrid import target_factory
        from labgrid.driver import SigrokDriver
        for rail in device_type.rails:
            if not rail.channel or rail.ampsPerVolt is None:
                raise InfraError(f"device type {device_type.name}: sigrok rail {rail.name} needs "
                                 f"a channel and ampsPerVolt", reason=LabFault.no_monitor)
        device = resources.get(cls.RESOURCE)
        if device is None:
            raise InfraError(f"{target.name}: rails on sigrok need a {cls.RESOURCE} in the place "
                             f"(has {', '.join(resources) or 'nothing'})",
                             reason=LabFault.no_monitor)
        if shutil.which("sigrok-cli") is None:
            raise InfraError("sigrok-cli is not installed where the session runs (labgrid runs "
                             "it locally for a SigrokDevice; Debian package sigrok-cli)",
                             reason=LabFault.no_monitor)
        args = {k: v for k, v in device.items() if k != "extra"}
        drivers = {}
        for rail in device_type.rails:
            name = f"rail-{rail.name}"
            target_factory.make_resource(target, cls.RESOURCE, name,
                                         {**args, "channels": rail.channel})
            target.set_binding_map({"sigrok": name})
            drivers[rail.name] = SigrokDriver(target, name=name)
            target.activate(drivers[rail.name])
        cfg = device_type.powerMonitor or PowerMonitor()
        return cls(drivers, device_type.rails, cfg.samplerate, cfg.captureSeconds)

    def _capture(self, rail: Rail) -> list[dict[str, str]]:
        driver = self.drivers[rail.name]
        driver.capture(str(Path(self._dir.name) / f"{rail.name}.sr"), samplerate=self.samplerate)
        time.sleep(self.capture_s)
        return cast(list[dict[str, str]], driver.stop())

    def read(self) -> dict[str, tuple[float, float]]:
        out = {}
        for rail in self.rails:
            try:
                rows = self._capture(rail)
                out[rail.name] = power.sense_power([r[rail.channel] for r in rows],
                                                   rail.voltage, rail.ampsPerVolt or 0.0)
            except Exception as exc:
                raise InfraError(f"sigrok rail {rail.name} (channel {rail.channel}): "
                                 f"{type(exc).__name__}: {exc}",
                                 reason=LabFault.monitor_failed) from exc
        return out

    def state(self) -> str | None:
        return None


def monitor_for(device_type: DeviceType, resources: dict[str, dict[str, Any]],
                target: Any = None) -> RailMonitor:
    """`resources`: the place's, as the coordinator lists them; `target`: the board's labgrid
    target (its resources carry what the exporter says about reaching them)."""
    cfg = device_type.powerMonitor
    if cfg is None or not device_type.rails:
        raise InfraError(f"device type {device_type.name} has no rail monitor",
                         reason=LabFault.no_monitor)
    if cfg.backend == "virtual":
        from labgrid.resource import NetworkPowerPort
        ports = [r for r in (target.resources if target is not None else [])
                 if isinstance(r, NetworkPowerPort)]
        if len(ports) != 1:
            raise InfraError(f"device type {device_type.name}: the virtual rail monitor needs the "
                             f"place's one NetworkPowerPort (has {', '.join(resources) or 'nothing'})",
                             reason=LabFault.no_monitor)
        return VirtualRailMonitor.for_power_port(ports[0])
    if cfg.backend == "hwmon":
        return HwmonRailMonitor(Path(cfg.root), {r.name: r.channel for r in device_type.rails})
    if cfg.backend == "sigrok":
        return SigrokRailMonitor.for_place(device_type, resources, target)
    raise InfraError(f"unknown rail monitor backend {cfg.backend!r}", reason=LabFault.no_monitor)


class Sampler:
    """Reads a monitor at a fixed rate in a thread, keeping timestamped readings and states."""

    def __init__(self, monitor: RailMonitor, rate_hz: float) -> None:
        self.monitor = monitor
        self.period = 1.0 / max(0.1, rate_hz)
        self.readings: list[power.Reading] = []
        self.states: list[tuple[float, str | None]] = []
        self.error: Exception | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rail-sampler", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling. A step shorter than the period got one reading (or none, if the
        thread had not run yet): one more now, so every step has a span of readings."""
        self._stop.set()
        self._thread.join(timeout=10)
        if len(self.readings) < 2 and self.error is None and not self._thread.is_alive():
            self._read()

    def _read(self) -> None:
        t = time.monotonic()
        try:
            reading = self.monitor.read()
            self.readings.append((t, reading))
            self.states.append((t, self.monitor.state()))
        except Exception as exc:  # keep the first error; the suite reports it
            log.debug("rail sampling failed", exc_info=True)
            self.error = self.error or exc

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.monotonic()
            self._read()
            self._stop.wait(max(0.0, self.period - (time.monotonic() - t)))
