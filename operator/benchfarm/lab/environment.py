"""A place's labgrid target, built from the labgrid environment YAML of its device type.

A labgrid user describes a board with an environment file: a target whose `RemotePlace` names the
place, and the drivers that act on what the coordinator lists for it — the power driver of its
PDU, a console driver, a shell driver, a strategy. benchfarm reads that same file, one per device
type (`labgrid:` in the device type names it, a file beside it; `!template $LG_PLACE` stands for
the place), so any power or console backend labgrid supports works without benchfarm code. A
device type without one gets the environment a labgrid user would write for the place's resources
(the power driver for its power resource, SerialDriver, ShellDriver with the device type's
prompt). benchfarm's strategy is added when the file does not name it.

The target comes from labgrid's own factory; its RemotePlace is expanded by labgrid's
RemotePlaceManager over benchfarm's coordinator session (no second connection to the
coordinator, no second sync of the whole lab).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from labgrid import Target, target_factory
from labgrid.util.yaml import load as load_labgrid_yaml, resolve_templates

from benchfarm.api.devicetype import DeviceType
from benchfarm.api.outcomes import LabFault
from benchfarm.errors import InfraError
from benchfarm.lab.labgrid_compat import adopt_session, forget_resources
from benchfarm.lab.strategy import BenchfarmStrategy, first_line
from benchfarm.settings import Settings

STRATEGY = BenchfarmStrategy.__name__

# A place's power resource (as the coordinator lists it) -> the labgrid driver that switches it.
POWER_DRIVERS = {
    "NetworkPowerPort": "NetworkPowerDriver",
    "PDUDaemonPort": "PDUDaemonDriver",
    "NetworkYKUSHPowerPort": "YKUSHPowerDriver",
    "NetworkUSBPowerPort": "USBPowerDriver",
    "NetworkSiSPMPowerPort": "SiSPMPowerDriver",
    "TasmotaPowerPort": "TasmotaPowerDriver",
}


# -- the environment ------------------------------------------------------------------------------
def derived_environment(place: str, resources: dict[str, dict[str, Any]],
                        device_type: DeviceType) -> dict[str, Any]:
    """The target config a labgrid user would write for these resources."""
    assert device_type.console is not None   # a device type has a console or an environment
    power = next((cls for cls in POWER_DRIVERS if cls in resources), None)
    if "NetworkSerialPort" not in resources or power is None:
        raise InfraError(f"place {place} lacks a serial port or a power port labgrid can switch "
                         f"(has {', '.join(resources) or 'nothing'}); is its exporter running?",
                         reason=LabFault.place_incomplete)
    return {
        "resources": [{"RemotePlace": {"name": place}}],
        "drivers": [
            {POWER_DRIVERS[power]: {}},
            {"SerialDriver": {}},
            {"ShellDriver": {"prompt": device_type.console.prompt,
                             "login_prompt": "benchfarm-no-login-prompt", "username": "root",
                             "login_timeout": 30, "await_login_timeout": 1}},
            {STRATEGY: {}},
        ],
    }


def labgrid_variables(settings: Settings) -> dict[str, str]:
    """labgrid's own `LG_*` variables of the environment the settings were read from (a device
    type's labgrid environment may name them, as `labgrid-client` would fill them in)."""
    return {k: v for k, v in settings.environ.items() if k.startswith("LG_")}


def environment(place: str, resources: dict[str, dict[str, Any]], device_type: DeviceType,
                variables: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The target config for a place: its device type's labgrid environment with the place
    filled in (`$LG_PLACE`, and labgrid's own `$BASE` and `LG_*` `variables`:
    `labgrid_variables`), or the derived one."""
    if not device_type.labgrid:
        return derived_environment(place, resources, device_type)
    path = Path(device_type.labgrid)
    try:
        with path.open() as f:
            data = load_labgrid_yaml(f)
        resolve_templates(data, {**(variables or {}), "BASE": str(path.parent.resolve()),
                                 "LG_PLACE": place})
    except (OSError, yaml.YAMLError, KeyError, ValueError) as exc:
        raise InfraError(f"device type {device_type.name}: its labgrid environment {path.name} "
                         f"cannot be read: {type(exc).__name__}: {first_line(exc)}",
                         reason=LabFault.environment_invalid) from exc
    targets = (data or {}).get("targets") or {}
    if len(targets) != 1:
        raise InfraError(f"device type {device_type.name}: its labgrid environment {path.name} "
                         f"must describe one target (has {len(targets)})",
                         reason=LabFault.environment_invalid)
    config = dict(next(iter(targets.values())) or {})
    drivers = config.get("drivers") or []
    if isinstance(drivers, dict):
        drivers = [{cls: args} for cls, args in drivers.items()]
    if not any(STRATEGY in d for d in drivers):
        drivers = [*drivers, {STRATEGY: {}}]
    config["drivers"] = drivers
    return config


# -- the target -----------------------------------------------------------------------------------
def build_target(place: str, config: dict[str, Any], session: Any) -> Target:
    """labgrid's target for an acquired place, its RemotePlace expanded over `session`."""
    adopt_session(session)
    try:
        return target_factory.make_target(place, config)
    except Exception as exc:   # labgrid's binding, resource and user errors alike
        _forget(lambda r: r.target.name == place)
        raise InfraError(f"{place}: the labgrid environment of its device type does not fit it: "
                         f"{type(exc).__name__}: {first_line(exc)}",
                         reason=LabFault.place_incomplete) from exc


def forget_target(target: Target) -> None:
    """Drop a closed target's resources from the RemotePlaceManager, which keeps every resource
    it ever expanded and polls them all (a long session builds one target per console opened
    afresh)."""
    _forget(lambda r: r.target is target)


def _forget(doomed: Any) -> None:
    forget_resources(doomed)
