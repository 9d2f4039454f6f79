"""Where the dev lab keeps things and which ports it takes: one place for every path and number.

State under `.benchfarm/` of the clone (or BENCHFARM_STATE), Go-built binaries cached by version
under `~/.cache/benchfarm` (or BENCHFARM_CACHE), all ports on 127.0.0.1 counted from
BENCHFARM_PORT_BASE so several labs (helper sessions, CI) can share a machine.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STATE = Path(os.environ.get("BENCHFARM_STATE", REPO / ".benchfarm"))
CACHE = Path(os.environ.get("BENCHFARM_CACHE", Path.home() / ".cache" / "benchfarm"))
PORT_BASE = int(os.environ.get("BENCHFARM_PORT_BASE", "21000"))
INVENTORY = Path(os.environ.get("BENCHFARM_INVENTORY", REPO / "exporters" / "virtual" / "lab.yaml"))
DEVICE_TYPES = REPO / "exporters" / "device-types"
VENV_BIN = Path(sys.executable).parent

K8S_VERSION = "v1.34.4"
ETCD_VERSION = "v3.5.35"
MINIO_VERSION = "v0.0.0-20260212201848-7aac2a2c5b7c"
HELM_VERSION = "v3.19.5"
BUCKET = "benchfarm-artifacts"


class LabError(Exception):
    """A component could not start; the message names it and its log."""


@dataclass(frozen=True)
class Ports:
    etcd: int = PORT_BASE + 379
    etcd_peer: int = PORT_BASE + 380
    apiserver: int = PORT_BASE + 443
    controller_manager: int = PORT_BASE + 257
    minio: int = PORT_BASE + 900
    minio_console: int = PORT_BASE + 901
    coordinator: int = PORT_BASE + 408
    pdu: int = PORT_BASE + 80
    pdudaemon: int = PORT_BASE + 90
    iperf3: int = PORT_BASE + 201
    operator_liveness: int = PORT_BASE + 81
    operator_metrics: int = PORT_BASE + 82
    chart_probes: int = PORT_BASE + 83       # the chart-installed operator in tests
    chart_metrics: int = PORT_BASE + 84
    standby_liveness: int = PORT_BASE + 85   # a second operator replica in the chaos tests
    standby_metrics: int = PORT_BASE + 86
    serial_base: int = PORT_BASE + 100


PORTS = Ports()


def say(msg: str) -> None:
    print(f"[lab] {msg}", flush=True)
