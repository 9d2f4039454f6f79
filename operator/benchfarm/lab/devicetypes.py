"""The lab's device types, read from their directory (`exporters/device-types/*.yaml`).

Apart from `lab.environment` (which builds labgrid targets from them) because the operator reads
device types too and must not import what drives a board (an import contract keeps `kube` away
from the board's drivers): this module imports no labgrid.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from benchfarm.api.devicetype import DeviceType

# Files named so beside the device types are labgrid environments, not device types.
ENVIRONMENT_SUFFIX = ".labgrid.yaml"


_read: dict[Path, tuple[tuple[tuple[str, int, int], ...], dict[str, DeviceType]]] = {}


def load_device_types(directory: Path) -> dict[str, DeviceType]:
    """Every device type in a directory, by name; `labgrid` made a path to the environment.
    Read again only when a file changed (name, size, mtime): a session forked by the session
    server, which read them before, does not parse them on its way to the board (30 ms of CPU
    on a quiet host, several times that on a busy one)."""
    files = sorted(f for f in directory.glob("*.yaml") if not f.name.endswith(ENVIRONMENT_SUFFIX))
    stamp = tuple((f.name, st.st_size, st.st_mtime_ns) for f in files for st in (f.stat(),))
    known = _read.get(directory)
    if known is not None and known[0] == stamp:
        return dict(known[1])
    out = {}
    for f in files:
        dt = DeviceType(**yaml.load(f.read_text(), Loader=_Loader))
        if dt.labgrid:
            dt.labgrid = str(directory / dt.labgrid)
        out[dt.name] = dt
    _read[directory] = (stamp, out)
    return dict(out)


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
