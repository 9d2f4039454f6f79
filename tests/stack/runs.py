"""Helpers the stack tests share: BenchmarkRuns from Python, waiting on them, the lab's hooks."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid

import yaml

import benchfarm_devlab as devlab
from benchfarm.lab.coordinator import Coordinator
from benchfarm.settings import Settings
from tests.stack.conftest import wait_for

GROUP, VERSION = "benchfarm.io", "v1alpha1"


def run_yaml(name, ns="default", plan="stacktest-fast", **spec):
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "BenchmarkRun",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"deviceType": "qemu-x86"}, **({"plan": plan} if plan else {}),
                     **spec}}
    return yaml.safe_dump(body)


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def get(custom, name, ns="default"):
    return custom.get_namespaced_custom_object(GROUP, VERSION, ns, "benchmarkruns", name)


def status(custom, name, ns="default"):
    return get(custom, name, ns).get("status", {})


def finished(custom, name, ns="default", timeout=240):
    def ended():
        st = status(custom, name, ns)
        return st if st.get("phase") in ("Succeeded", "Failed", "Cancelled") else None
    # one GET a poll, four a second: a whole make test waits for ~200 runs to end
    return wait_for(f"{ns}/{name} to finish", ended, timeout=timeout, every=0.25)


def cond(st, type_="Succeeded"):
    return next((c for c in st.get("conditions", []) if c["type"] == type_), {})


def ts(iso):
    return time.mktime(time.strptime(iso, "%Y-%m-%dT%H:%M:%SZ"))


class PersonLock:
    """A person holding a board with labgrid (what `labgrid-client acquire` does)."""

    def __init__(self, place):
        self.place = place
        self.c = Coordinator.from_settings(Settings.from_env(), user="alice", host="desk")

    def __enter__(self):
        wait_for(f"{self.place} free", lambda: self.c.places()[self.place].free, timeout=300)
        self.c.acquire(self.place)
        return self

    def release(self):
        self.c.release(self.place)

    def __exit__(self, *exc):
        self.c.release(self.place)
        self.c.close()


def lab_forwarder():
    """A loopback forwarder to the coordinator with the lab administrator's certificate (from
    `.benchfarm/env`): the stock `labgrid-client` speaks no TLS; point its LG_COORDINATOR here."""
    from benchfarm.lab.labgrid_forward import Forwarder, client_context
    env = devlab.lab_env()
    return Forwarder(env["LG_COORDINATOR"], client_context(
        env["BENCHFARM_LABGRID_CA"], env["BENCHFARM_LABGRID_CERT"], env["BENCHFARM_LABGRID_KEY"]))


class Person:
    """A lease's person: a key pair of their own (the lease's spec.publicKey) and, once the lease
    is granted, the certificate the operator issued for it (status.access) behind a loopback
    forwarder, as `benchfarm lease --shell` runs it."""

    def __init__(self, workdir):
        from benchfarm.lab.labgrid_pki import key_pem, new_key, public_pem
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        key = new_key()
        self.public_key = public_pem(key)
        self.key = key_pem(key)
        self.forwarder = None

    def connect(self, access):
        from benchfarm.lab.labgrid_forward import Forwarder, client_context
        from benchfarm.lab.labgrid_pki import write_private
        write_private(self.dir / "key.pem", self.key)
        write_private(self.dir / "cert.pem", access["certificate"])
        write_private(self.dir / "ca.pem", access["ca"])
        self.forwarder = Forwarder(access["coordinator"], client_context(
            self.dir / "ca.pem", self.dir / "cert.pem", self.dir / "key.pem"))
        return self.forwarder.address

    def labgrid_client(self, user, *args, place=None, timeout=30):
        """The stock labgrid-client through the person's forwarder, claiming `user`; its ssh (to
        the exporter hosts, which the boards' consoles and power are behind) with the lab's
        ssh_config (BENCHFARM_SSH_CONFIG): what is tried here is the coordinator's identity."""
        host, _, name = user.partition("/")
        env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_LABGRID")}
        env.update(LG_COORDINATOR=self.forwarder.address, LG_HOSTNAME=host, LG_USERNAME=name)
        return subprocess.run([str(devlab.VENV_BIN / "python"), "-m", "benchfarm.lab.labgrid_forward",
                               "--stock-client",
                               *(["-p", place] if place else []), *args],
                              env=env, capture_output=True, text=True, timeout=timeout)

    def close(self):
        if self.forwarder is not None:
            self.forwarder.close()


def seen_held(custom, board):
    """Until the operator has seen a PersonLock on the board (its next look at the places)."""
    wait_for(f"the operator to see the person's lock on {board}", lambda: "alice" in str((
        custom.get_cluster_custom_object(GROUP, VERSION, "boards", board).get("status")
        or {}).get("run")), timeout=30)


def place_acquired(place):
    c = Coordinator.from_settings(Settings.from_env(), user="pytest", host="check")
    try:
        return c.places()[place].acquired
    finally:
        c.close()



def outlet_on(place):
    cfg = json.loads((devlab.STATE / "vlab" / "vlab.json").read_text())
    index = next(b["index"] for b in cfg["boards"] if b["name"] == place)
    return devlab.vlab_request(f"/outlet/{index}/") == "1"



def fault(index, mode):
    devlab.vlab_request(f"/fault/{index}/{mode}")




def chaos(index, what):
    """One-shot chaos on a virtual board: disconnect | garbage | hang."""
    return devlab.vlab_request(f"/chaos/{index}/{what}")


def board_index(place):
    cfg = json.loads((devlab.STATE / "vlab" / "vlab.json").read_text())
    return next(b["index"] for b in cfg["boards"] if b["name"] == place)


def api_writes(ns, name):
    """Writes the API server recorded (its audit log) for one run: benchfarm's writes to the
    BenchmarkRun (object and status) and to its session Lease, each as
    [(user agent, verb, subresource)]. (Events are created with generateName: the audit log
    does not name them.)"""
    out = {"run": [], "lease": []}
    log = devlab.STATE / "logs" / "audit.log"
    for line in log.read_text(errors="replace").splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        ref = ev.get("objectRef") or {}
        if ev.get("stage") != "ResponseComplete" or ref.get("namespace") != ns or \
                (ev.get("responseStatus") or {}).get("code", 200) >= 400:
            continue
        who = (ev.get("userAgent") or "?").split("/")[0]     # kubectl, kopf, OpenAPI-Generator
        entry = (who, ev.get("verb"), ref.get("subresource") or "")
        if ref.get("resource") == "benchmarkruns" and ref.get("name") == name:
            if who != "kubectl":            # the person's own apply is not benchfarm's write
                out["run"].append(entry)
        elif ref.get("resource") == "leases" and ref.get("name") == f"benchfarm-run-{name}":
            out["lease"].append(entry)
    return out


def pids_logging_to(prefix: str) -> list[int]:
    """PIDs of the session processes the launcher started whose log file's name starts with
    `prefix`: a cold process or one the session server forked writes there from its start."""
    pids = []
    for pidfile in (devlab.STATE / "pids").glob("session-*.pid"):
        try:
            pid = int(pidfile.read_text())
            out = os.path.basename(os.readlink(f"/proc/{pid}/fd/1"))
        except (OSError, ValueError):
            continue
        if out.startswith(prefix):
            pids.append(pid)
    return pids


def session_pids(ns, name):
    """PIDs of the session processes serving the run (`NS.NAME.attempt-A.run-R.log`)."""
    return pids_logging_to(f"{ns}.{name}.attempt-")
