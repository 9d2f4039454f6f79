"""benchfarm's embedded lab: a real control plane, MinIO, labgrid and QEMU boards on one machine.

`benchfarm lab up` starts, in order and idempotently, etcd, kube-apiserver (token auth + RBAC),
kube-controller-manager, MinIO, labgrid's coordinator, the virtual lab (serial brokers + PDU; each
board in a network namespace of its own with its iperf3 peers), one labgrid-exporter per exporter
host of the inventory; then creates and tags the places, and starts the operator. `benchfarm lab
cluster-up` adds a one-node Kubernetes cluster
(containerd, kubelet, kube-scheduler, kube-proxy; cluster/) next to it. Everything lives under
`.benchfarm/` (state, logs, PIDs) and `lab down` stops only what its PID files name (and removes
the cluster's bridge, chains and mounts by name).

This package is a developer's and CI's tool, installed beside `benchfarm` from the clone
(`make venv`); the operator image does not contain it. What tests, benchmarks and the demo use is
re-exported here.
"""

from benchfarm_devlab.boards import board_sensors, load_inventory, throttle, vlab_request
from benchfarm_devlab.cluster import down as cluster_down, up as cluster_up
from benchfarm_devlab.cluster.images import import_image
from benchfarm_devlab.cluster.network import pod_addresses
from benchfarm_devlab.config import (
    CACHE,
    DEVICE_TYPES,
    HELM_VERSION,
    K8S_VERSION,
    NOTIFY_RECEIVERS,
    PORT_BASE,
    PORTS,
    REPO,
    SMTP_CA_FILE,
    STATE,
    VENV_BIN,
    LabError,
)
from benchfarm_devlab.env import kubectl, lab_env, operator_env
from benchfarm_devlab.lab import (
    LAB_POLICY,
    apply_lab_policy,
    down,
    start_operator,
    start_web,
    status,
    up,
)
from benchfarm_devlab.pki import labgrid_files, labgrid_tls, write_kubeconfig
from benchfarm_devlab.processes import http_ok, running_pid, start_process, stop_process

__all__ = ["LAB_POLICY", "apply_lab_policy", "CACHE", "cluster_down", "cluster_up", "import_image",
           "pod_addresses", "DEVICE_TYPES", "HELM_VERSION", "K8S_VERSION", "NOTIFY_RECEIVERS",
           "PORTS", "PORT_BASE", "REPO",
           "SMTP_CA_FILE", "STATE", "VENV_BIN", "LabError", "down", "http_ok", "kubectl", "lab_env",
           "labgrid_files", "labgrid_tls", "operator_env",
           "load_inventory", "running_pid", "start_operator", "start_process", "start_web", "status",
           "stop_process", "up", "vlab_request", "board_sensors", "throttle",
           "write_kubeconfig"]
