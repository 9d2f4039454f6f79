"""The lab as a whole: `up` starts every stopped part in order, `down` stops them in reverse,
`status` lists them; the operator and the dashboard are started like any other component, with
the same commands a cluster's Deployments run. The boards' hardware (the virtual lab, pdudaemon,
the exporters, the exporter hosts' sshd) runs in the lab network (labnet.py), the rest on the
host.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from benchfarm_devlab import labnet
from benchfarm_devlab.binaries import binaries
from benchfarm_devlab.boards import load_inventory, start_virtual_lab
from benchfarm_devlab.builds import publish
from benchfarm_devlab.config import PORTS, REPO, STATE, VENV_BIN, say
from benchfarm_devlab.controlplane import start_control_plane, start_minio
from benchfarm_devlab.env import kubectl, lab_env, operator_env, write_env
from benchfarm_devlab.pki import ensure_labgrid_pki
from benchfarm_devlab.places import start_labgrid, start_pdudaemon, stop_host_peers
from benchfarm_devlab.postgres import start_postgres, stop_postgres
from benchfarm_devlab.processes import (
    FIRST_NICE,
    OPERATOR_FIRST,
    http_ok,
    running_pid,
    start_process,
    stop_process,
)
from benchfarm_devlab.sshauth import write_config as write_lease_auth
from benchfarm_devlab.sshd import start_sshd, stop_masters

# The lab's LabPolicy: namespace `default` (the examples', the demo's) may boot software from its
# own folder and the kernel builds the lab publishes under builds/ (builds.py); others may not.
LAB_POLICY = {
    "apiVersion": "benchfarm.io/v1alpha1", "kind": "LabPolicy", "metadata": {"name": "default"},
    "spec": {"namespaces": [{"namespace": "default", "allowSoftware": True,
                             "softwareSources": ["builds/"],
                             "leases": {"allowed": True, "maxLeaseSeconds": 4 * 3600}}]}}


def apply_lab_policy() -> None:
    """The lab's LabPolicy `default` as above, and nothing else (stack tests that change it put
    it back: fields another apply set must not linger)."""
    kubectl("delete", "labpolicy", "default", "--ignore-not-found", capture=True)
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", capture=True,
            input=json.dumps(LAB_POLICY))


def install_crds_and_plans() -> None:
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"), capture=True)
    kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all", capture=True)
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "testplans"), capture=True)
    apply_lab_policy()
    wait_lease_admission()


def wait_lease_admission(timeout: float = 90.0) -> None:
    """The BoardLease admission policy takes the LabPolicy as its parameter; a fresh API server
    finds that kind some seconds after the CRD (its discovery refresh) and refuses every lease
    until then: wait for it (a server-side dry run goes through admission)."""
    probe = json.dumps({"apiVersion": "benchfarm.io/v1alpha1", "kind": "BoardLease",
                        "metadata": {"name": "admission-probe", "namespace": "default"},
                        "spec": {"selector": {"deviceType": "none"}, "duration": "1m",
                                 "user": "lab/probe"}})
    deadline = time.monotonic() + timeout
    while True:
        res = kubectl("create", "--dry-run=server", "-f", "-", capture=True, check=False,
                      input=probe)
        if "paramKind" not in (res.stderr or "") or time.monotonic() > deadline:
            return
        time.sleep(1)


def start_operator() -> None:
    """The operator as a lab component: same command a cluster Deployment runs. Not while the
    one-node cluster runs the release of `make demo-cluster` (one operator per lab)."""
    install_crds_and_plans()
    from benchfarm_devlab import cluster, release
    if cluster.is_up() and release.ready_replicas() > 0:
        say(f"the operator runs in the cluster (helm release {release.RELEASE} in "
            f"{release.NAMESPACE}); `make cluster-down` to go back to the local one")
        return
    env = {**lab_env(), **operator_env(), **OPERATOR_FIRST}
    start_process("benchfarm-operator", [str(VENV_BIN / "benchfarm"), "operator"], env=env,
                  nice=FIRST_NICE, ports=[PORTS.operator_liveness, PORTS.operator_metrics], timeout=90,
                  ready=lambda: http_ok(env["BENCHFARM_LIVENESS"]))


def start_web() -> None:
    """The dashboard (`benchfarm web`) as a lab component, at BENCHFARM_WEB_URL: the lab's admin
    kubeconfig is its account (it reviews people's tokens and reads for them)."""
    env = lab_env()
    start_process("benchfarm-web", [str(VENV_BIN / "benchfarm"), "web", "--address", "127.0.0.1",
                                    "--port", str(PORTS.web)], env=env, ports=[PORTS.web],
                  timeout=60, ready=lambda: http_ok(f"{env['BENCHFARM_WEB_URL']}/healthz"))


def up() -> Path:
    t0 = time.monotonic()
    STATE.mkdir(parents=True, exist_ok=True)
    inventory = load_inventory()
    phase = time.monotonic()
    bins = binaries()
    say(f"binaries ready ({time.monotonic() - phase:.1f} s)")
    for name, step in (("control plane", lambda: start_control_plane(bins)),
                       ("MinIO", lambda: start_minio(bins)),
                       ("PostgreSQL", start_postgres)):
        phase = time.monotonic()
        step()
        say(f"{name} ready ({time.monotonic() - phase:.1f} s)")
    phase = time.monotonic()
    config = start_virtual_lab(inventory)
    say(f"virtual boards ready: {len(config['boards'])} ({time.monotonic() - phase:.1f} s)")
    phase = time.monotonic()
    labnet.start_inner_relay()     # the lab network and its side of the crossings (labnet.py)
    start_pdudaemon(config)
    # the labgrid CA first (made once): the sshd trusts its key for the leases' certificates
    ensure_labgrid_pki([exp["name"] for exp in inventory["exporters"]])
    write_lease_auth()     # who else the sshd lets in: the leases' certificates (sshauth.py)
    start_sshd([exp["name"] for exp in inventory["exporters"]])
    labnet.start_gate()            # the host's side: its only way to the boards' hardware
    start_labgrid(config, inventory)
    stop_host_peers()
    say(f"labgrid coordinator, exporters and places ready ({time.monotonic() - phase:.1f} s)")
    if "arm64" in config["images"]:
        phase = time.monotonic()
        publish(Path(config["images"]["arm64"]))
        say(f"kernel builds in the store under builds/ ({time.monotonic() - phase:.1f} s)")
    env = write_env()
    say(f"lab up in {time.monotonic() - t0:.1f} s; `source {env}` to use it")
    return env


COMPONENTS_DOWN_ORDER = ["benchfarm-web", "benchfarm-operator*", "session-*", "kube-scheduler", "kubelet", "kube-proxy",
                         "containerd", "lab-gateway", "iperf3*", "labgrid-exporter-*", "labgrid-coordinator",
                         "labnet-gate", "sshd", "pdudaemon*", "labnet-inner",
                         "vlab", "postgres", "minio", "kube-controller-manager", "kube-apiserver", "etcd"]


def down() -> None:
    from benchfarm_devlab import cluster
    cluster.down(lab_stays=False)     # first, while the API server still answers
    pids = STATE / "pids"
    if not pids.exists():
        say("nothing to stop")
        return
    names = [p.stem for p in pids.glob("*.pid")]
    ordered: list[str] = []
    for pattern in COMPONENTS_DOWN_ORDER:
        ordered += sorted(n for n in names if n not in ordered and
                          (n == pattern or (pattern.endswith("*") and n.startswith(pattern[:-1]))))
    ordered += [n for n in names if n not in ordered]
    for name in ordered:
        if name == "postgres":
            stop_postgres()     # a fast shutdown: its clients are not waited for
        if stop_process(name):
            say(f"stopped {name}")
    if stopped := stop_masters():
        say(f"stopped {stopped} ssh connection(s) labgrid kept open to the exporters")
    if labnet.remove():
        say(f"removed the lab network {labnet.NETNS}")


def status() -> dict[str, int | None]:
    """Lab components (None when stopped) and the board sessions that still run."""
    out = {}
    for p in sorted((STATE / "pids").glob("*.pid")):
        pid = running_pid(p.stem)
        if p.stem.startswith("session-") and pid is None:
            p.unlink(missing_ok=True)    # a session that ended: nothing to report or restart
            continue
        out[p.stem] = pid
    return out
