"""The lab's device types, read from their directory (`exporters/device-types/*.yaml`).

Apart from `lab.environment` (which builds labgrid targets from them) because the operator reads
device types too and must not import what drives a board (an import contract keeps `kube` away
from the board's drivers): this module imports no labgrid.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from ..api.devicetype import DeviceType

# Files named so beside the device types are labgrid environments, not device types.
ENVIRONMENT_SUFFIX = ".labgrid.yaml"


def load_device_types(directory: Path) -> dict[str, DeviceType]:
    """Every device type in a directory, by name; `labgrid` made a path to the environment."""
    out = {}
    for f in sorted(directory.glob("*.yaml")):
        if f.name.endswith(ENVIRONMENT_SUFFIX):
            continue
        dt = DeviceType(**yaml.safe_load(f.read_text()))
        if dt.labgrid:
            dt.labgrid = str(directory / dt.labgrid)
        out[dt.name] = dt
    return out
