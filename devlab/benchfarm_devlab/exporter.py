"""labgrid's exporter as the embedded lab runs it: labgrid's own `labgrid-exporter`, arguments
included, connecting with the exporter's certificate when BENCHFARM_LABGRID_CA/_CERT/_KEY name one
(`benchfarm.lab.labgrid_compat.secure_exporters`); the coordinator lets that certificate be this
exporter and nothing else.

With BENCHFARM_EXPORTER_HOST (places.start_labgrid sets it, and starts it in the lab network:
labnet.inside) the process is that exporter host: it enters a UTS namespace of its own (the
machine's hostname is left alone) named so, and that name is what an `--isolated` exporter
publishes as every resource's `extra.proxy`, the host labgrid's clients forward through (labgrid
takes `socket.getfqdn()` for it, which would ask the resolver about a name only the lab's
ssh_config knows: pinned to the hostname here).
"""

from __future__ import annotations

import ctypes
import os
import socket
import sys

import labgrid.remote.exporter as lg_exporter

from benchfarm.lab.labgrid_compat import TlsSettings, secure_exporters
from benchfarm.settings import Settings

_CLONE_NEWUTS = 0x04000000


def become_host(name: str) -> None:
    """This process in a UTS namespace of its own, named `name` (needs CAP_SYS_ADMIN, as the
    lab network does; before any thread starts)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWUTS) != 0:
        err = ctypes.get_errno()
        raise SystemExit(f"exporter host {name}: unshare(CLONE_NEWUTS): {os.strerror(err)}")
    socket.sethostname(name)
    lg_exporter.getfqdn = socket.gethostname


if __name__ == "__main__":
    if host := os.environ.get("BENCHFARM_EXPORTER_HOST"):
        become_host(host)
    tls = TlsSettings.from_settings(Settings.from_env())
    if tls is not None:
        secure_exporters(tls)
    sys.exit(lg_exporter.main())
