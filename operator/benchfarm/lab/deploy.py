"""The software under test onto the board's exporter, where its bootloader loads it from.

A lab serves boot files from each exporter host (a TFTP server's directory, exported by
labgrid-exporter as a `TFTPProvider`); a labgrid user stages a file with the environment's
`TFTPProviderDriver`, which copies it to the exporter over SSH (`ManagedFile`: rsync, or nothing
when the exporter sees the same file) and links it into the TFTP directory. benchfarm does the same
for every verified file of a run's software set, then hands the bootloader the staged names as
variables (`bf_kernel`, `bf_initrd`, `bf_dtb`, `bf_args`) that the device type's boot command uses.

SSH: the ssh_config named by `BENCHFARM_SSH_CONFIG` is given to every ssh and rsync that labgrid
starts (`labgrid_compat.use_ssh_config`, a process-wide patch the session's `Coordinator` made
when it connected, before any place was acquired).
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any

from labgrid.driver.exception import ExecutionError
from labgrid.util.managedfile import ManagedFileError

from benchfarm.api.outcomes import LabFault
from benchfarm.errors import InfraError
from benchfarm.lab.strategy import first_line

log = logging.getLogger(__name__)

# The bootloader variables a device type's boot command reads (see its labgrid environment).
VARIABLES = {"kernel": "bf_kernel", "initrd": "bf_initrd", "dtb": "bf_dtb", "bootArgs": "bf_args"}


def with_modules(initrd: Path, modules: Path) -> Path:
    """The initrd with the modules archive appended (4-byte aligned, as the kernel's initramfs
    unpacker reads a sequence of archives), beside the modules; named by the result's digest."""
    size = initrd.stat().st_size
    pad = b"\0" * (-size % 4)
    h = hashlib.sha256()
    for part in (initrd.read_bytes(), pad, modules.read_bytes()):
        h.update(part)
    path = modules.parent / f"{h.hexdigest()[:12]}-initrd+modules"
    if not path.exists():
        tmp = path.with_suffix(".part")
        with tmp.open("wb") as out:
            out.write(initrd.read_bytes())
            out.write(pad)
            out.write(modules.read_bytes())
        os.replace(tmp, path)
    return path


def stage(target: Any, files: dict[str, Path], boot_args: str | None) -> dict[str, str]:
    """Stage each file (kernel, initrd, dtb: verified local files) through the target's
    TFTPProviderDriver; the bootloader variables that name them."""
    variables = {}
    if files:
        driver = _tftp_driver(target)
        for part, path in files.items():
            try:
                name = driver.stage(str(path))
            except (ExecutionError, ManagedFileError, OSError) as exc:
                raise InfraError(f"{target.name}: staging {part} on the exporter failed "
                                 f"({type(exc).__name__}: {first_line(exc)}); is its SSH "
                                 f"reachable (BENCHFARM_SSH_CONFIG)?",
                                 reason=LabFault.staging_failed) \
                    from exc
            log.info("%s: %s staged as %s", target.name, part, name)
            variables[VARIABLES[part]] = name.lstrip("/")
    if boot_args:
        variables[VARIABLES["bootArgs"]] = boot_args
    return variables


def _tftp_driver(target: Any) -> Any:
    try:
        driver = target.get_driver("TFTPProviderDriver")
        target.activate(driver)
        return driver
    except Exception as exc:
        raise InfraError(f"{target.name}: its labgrid environment has no usable "
                         f"TFTPProviderDriver ({type(exc).__name__}: {first_line(exc)}); "
                         f"the place needs a TFTPProvider", reason=LabFault.staging_failed) from exc
