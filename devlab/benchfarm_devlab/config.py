"""Where the dev lab keeps things and which ports it takes: one place for every path and number.

State under `.benchfarm/` of the clone (or BENCHFARM_STATE), Go-built binaries cached by version
under `~/.cache/benchfarm` (or BENCHFARM_CACHE), all ports on 127.0.0.1 counted from
BENCHFARM_PORT_BASE so several labs (helper sessions, CI) can share a machine; the one-node
cluster's addresses (a local bridge, derived from the port base too) are here as well.
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
BRIDGE = f"bf{PORT_BASE}"     # the one-node cluster's bridge (cluster/), one per port base
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
    postgres: int = PORT_BASE + 432             # the results database (postgres.py)
    coordinator: int = PORT_BASE + 408
    # the one PDU port and the one pdudaemon of labs before each board had its own (outlet_base,
    # pdudaemon_base): nothing listens there now; the misuse tests check that nothing answers
    pdu: int = PORT_BASE + 80
    pdudaemon: int = PORT_BASE + 90
    iperf3: int = PORT_BASE + 201
    sshd: int = PORT_BASE + 22                  # the exporter hosts' SSH (sshd.py)
    operator_liveness: int = PORT_BASE + 81
    operator_metrics: int = PORT_BASE + 82
    chart_probes: int = PORT_BASE + 83       # the chart-installed operator in tests
    chart_metrics: int = PORT_BASE + 84
    standby_liveness: int = PORT_BASE + 85   # a second operator replica in the chaos tests
    standby_metrics: int = PORT_BASE + 86
    serial_base: int = PORT_BASE + 100
    # each board's own power switch (vlab.py: its outlet, rails, QMP state and Tasmota plug, no
    # other board's) and, for a board on pdudaemon, its own pdudaemon (places.py), + board index
    outlet_base: int = PORT_BASE + 500
    pdudaemon_base: int = PORT_BASE + 600
    # the simulated boards of the scale benchmark (scale.py): a PDU and up to 1,000 serial ports
    sim_pdu: int = PORT_BASE + 87
    web: int = PORT_BASE + 88                # benchfarm web, the dashboard (BENCHFARM_WEB_URL)
    # notifications' receivers of the stack tests: webhooks (NOTIFY_RECEIVERS ports from here;
    # the operator may post to them, BENCHFARM_WEBHOOK_LOOPBACK_PORTS) and an SMTP server
    notify_receivers: int = PORT_BASE + 60
    smtp: int = PORT_BASE + 70
    sim_serial_base: int = PORT_BASE + 1000
    # the one-node cluster of `benchfarm lab cluster-up` (cluster/)
    kubelet_healthz: int = PORT_BASE + 248
    kube_proxy_metrics: int = PORT_BASE + 249
    kubelet: int = PORT_BASE + 250                # on the pods' host address (API server -> kubelet)
    containerd_stream: int = PORT_BASE + 251      # exec/attach/port-forward streams, kubelet -> containerd
    kube_proxy_healthz: int = PORT_BASE + 256
    kube_scheduler: int = PORT_BASE + 259


PORTS = Ports()
NOTIFY_RECEIVERS = 8
# the CA the stack tests' SMTP server's certificate is issued by, written by the test that starts
# it (the operator reads it at each delivery: BENCHFARM_SMTP_CA_FILE)
SMTP_CA_FILE = STATE / "notify" / "smtp-ca.pem"

# The one-node cluster's addresses (cluster/). Pods live on a local bridge in POD_CIDR; the
# bridge's own address, HOST_ADDR, is where pods reach the host (the API server and the lab's
# services, relayed to their 127.0.0.1 listeners). Derived from the port base so two labs'
# bridges never overlap; the Service range is the API server's (the kubernetes Service is its
# first address). No address is routed off the machine.
_NET = (PORT_BASE // 100) % 256
POD_CIDR = f"10.244.{_NET}.0/24"
HOST_ADDR = f"10.244.{_NET}.1"
SERVICE_CIDR = "10.96.0.0/24"
SERVICE_IP = "10.96.0.1"
CLUSTER_DIR = STATE / "cluster"


def say(msg: str) -> None:
    print(f"[lab] {msg}", flush=True)
