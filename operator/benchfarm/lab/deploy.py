"""The software under test onto the board's exporter, where its bootloader loads it from.

A lab serves boot files from each exporter host (a TFTP server's directory, exported by
labgrid-exporter as a `TFTPProvider`); a labgrid user stages a file with the environment's
`TFTPProviderDriver`, which copies it to the exporter over SSH (`ManagedFile`: rsync, or nothing
when the exporter sees the same file) and links it into the TFTP directory. benchfarm does the same
for every verified file of a run's software set, then hands the bootloader the staged names as
variables (`bf_kernel`, `bf_initrd`, `bf_dtb`, `bf_args`) that the device type's boot command uses.

SSH: labgrid's SSH takes every option from the user's ssh config. A session that runs somewhere
else (a pod, a lab with its own keys) names an ssh_config file in `BENCHFARM_SSH_CONFIG`; it is
given to every ssh and rsync that labgrid starts (and nothing else is read).
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any

from labgrid.driver.exception import ExecutionError
from labgrid.util.managedfile import ManagedFileError
from labgrid.util.ssh import SSHConnection

from ..errors import InfraError
from .strategy import first_line

log = logging.getLogger(__name__)

# The bootloader variables a device type's boot command reads (see its labgrid environment).
VARIABLES = {"kernel": "bf_kernel", "initrd": "bf_initrd", "dtb": "bf_dtb", "bootArgs": "bf_args"}
_BASE_ARGS = SSHConnection._get_ssh_base_args


def use_ssh_config(path: str | None = None) -> None:
    """Give labgrid's ssh and rsync this ssh_config (default: BENCHFARM_SSH_CONFIG)."""
    path = path or os.environ.get("BENCHFARM_SSH_CONFIG")
    if not path:
        return
    if " " in path:   # rsync -e joins ssh's arguments with spaces
        raise InfraError(f"BENCHFARM_SSH_CONFIG {path!r} has a space in it",
                         reason="StagingFailed")
    # labgrid calls SSHConnection._get_ssh_base_args() by its class name: only the class
    # attribute reaches every ssh it starts (master, commands, rsync's -e).
    SSHConnection._get_ssh_base_args = staticmethod(lambda: [*_BASE_ARGS(), "-F", path])


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
        use_ssh_config()
        driver = _tftp_driver(target)
        for part, path in files.items():
            try:
                name = driver.stage(str(path))
            except (ExecutionError, ManagedFileError, OSError) as exc:
                raise InfraError(f"{target.name}: staging {part} on the exporter failed "
                                 f"({type(exc).__name__}: {first_line(exc)}); is its SSH "
                                 f"reachable (BENCHFARM_SSH_CONFIG)?", reason="StagingFailed") \
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
                         f"the place needs a TFTPProvider", reason="StagingFailed") from exc
