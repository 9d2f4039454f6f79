"""labgrid's exporter as the embedded lab runs it: labgrid's own `labgrid-exporter`, arguments
included, connecting with the exporter's certificate when BENCHFARM_LABGRID_CA/_CERT/_KEY name one
(`benchfarm.lab.labgrid_compat.secure_exporters`); the coordinator lets that certificate be this
exporter and nothing else.
"""

from __future__ import annotations

import sys

from labgrid.remote.exporter import main

from benchfarm.lab.labgrid_compat import TlsSettings, secure_exporters

if __name__ == "__main__":
    tls = TlsSettings.from_env()
    if tls is not None:
        secure_exporters(tls)
    sys.exit(main())
