"""Health checks are sessions (issue 23, item 3), on the real stack: a quarantined board's check runs
in a session process of its own (launched like a run's, its own Lease and labgrid identity), never
in the operator, which opens no console; a check that fails keeps the board quarantined, one that
passes returns it to service. A real Prometheus scraping the operator fires the chart's alerts of
the quarantine (issue 43)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.request

import pytest
import yaml

import benchfarm_devlab as devlab
from benchfarm.lab.coordinator import Coordinator
from benchfarm.settings import Settings
from benchfarm_devlab.processes import pids_where
from tests.stack.conftest import apply, wait_for
from tests.stack.runs import GROUP, VERSION, fault, finished, pids_logging_to, run_yaml, unique

pytestmark = pytest.mark.stack

BOARD, INDEX = "vb-x86-0", 0


def board_status(custom) -> dict:
    return custom.get_cluster_custom_object(GROUP, VERSION, "boards", BOARD).get("status") or {}


def console_port() -> int:
    c = Coordinator.from_settings(Settings.from_env(), user="pytest", host="health")
    try:
        return int(c.places()[BOARD].resources["NetworkSerialPort"]["port"])
    finally:
        c.close()


def _sockets(pid: int) -> set[str]:
    """The inodes of process `pid`'s sockets (/proc/<pid>/fd)."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        pass
    return inodes


def _tcp(pid: int) -> list[list[str]]:
    """The TCP table of process `pid`'s network namespace, one row of fields per socket."""
    rows = []
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                rows += [line.split() for line in f.read().splitlines()[1:]]
        except OSError:
            pass
    return rows


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1], 16)


def connected_to(pid: int, ports: set[int]) -> bool:
    """Whether process `pid` has an established TCP connection to one of `ports` on its network
    namespace's loopback (its sockets by inode, matched against its namespace's table)."""
    inodes = _sockets(pid)
    return bool(inodes) and any(f[3] == "01" and _port(f[2]) in ports and f[9] in inodes
                                for f in _tcp(pid))


def ssh_forward_ports() -> set[int]:
    """The local ports this machine's ssh clients listen on: labgrid's forwards through the
    exporter hosts' SSH, the only way from the host to a board's console (devlab.labnet)."""
    ports = set()
    for pid in pids_where(lambda argv: argv[0].endswith(b"ssh")):
        inodes = _sockets(pid)
        ports |= {_port(f[1]) for f in _tcp(pid) if f[3] == "0A" and f[9] in inodes}
    return ports


def lab_sshds() -> list[int]:
    """The exporter hosts' sshd processes (the lab network's: the namespace vlab runs in)."""
    vlab = devlab.running_pid("vlab")
    netns = os.readlink(f"/proc/{vlab}/ns/net")

    def same_netns(pid: int) -> bool:
        try:
            return os.readlink(f"/proc/{pid}/ns/net") == netns
        except OSError:
            return False
    return [pid for pid in pids_where(lambda argv: argv[0].startswith(b"sshd")) if same_netns(pid)]


def health_session_pids() -> set[int]:
    """Session processes the operator launched for BOARD's health checks: their log file."""
    return set(pids_logging_to(f"health.{BOARD}.check-"))


class ConsoleWatch:
    """Samples, every 20 ms, who reaches the board's console. A board's console is reached only
    through the exporter host's SSH (the lab network, devlab.labnet): a session connects to its
    ssh client's local forward, and the exporter host's sshd to the console port (its serial
    server in the lab network). So it records which health-check sessions hold a connection to a
    local ssh forward while an exporter host's sshd holds one to the console, and whether the
    operator ever holds one to a forward or to the exporter hosts' SSH."""

    def __init__(self) -> None:
        self.port = console_port()
        self.operator = devlab.running_pid("benchfarm-operator")
        assert self.operator is not None
        self.operator_connected = 0
        self.console_forwarded = 0
        self.sessions_connected: set[int] = set()
        self.sessions_seen: set[int] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            forwards = ssh_forward_ports()
            self.operator_connected += connected_to(self.operator, forwards | {devlab.PORTS.sshd})
            console = any(connected_to(pid, {self.port}) for pid in lab_sshds())
            self.console_forwarded += console
            for pid in health_session_pids():
                self.sessions_seen.add(pid)
                if console and connected_to(pid, forwards):
                    self.sessions_connected.add(pid)
            time.sleep(0.02)

    def __enter__(self) -> ConsoleWatch:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join()


def events(custom, reason: str) -> list:
    from kubernetes import client
    return [e for e in client.CoreV1Api(custom.api_client).list_namespaced_event(
        "default", field_selector=f"involvedObject.name={BOARD},reason={reason}").items]


@pytest.fixture(scope="module")
def custom(kube, operator):
    from kubernetes import client
    return client.CustomObjectsApi(kube)


@pytest.fixture
def prometheus(tmp_path):
    """Debian's Prometheus scraping the lab's operator every second, with the chart's rules as
    `helm template` renders them for a lab that wants to hear of a quarantine at once and of a
    single board fault (`for: 0s`, threshold 1). Started before the quarantine: it sees the
    fault counter go from 0 to 1. Yields a function returning the firing alerts' labels."""
    from tests.stack.chart import CHART, helm
    exe = shutil.which("prometheus")
    assert exe, "Prometheus is not installed (make promtool-deps: Debian's prometheus package)"
    rule = next(d for d in yaml.safe_load_all(helm(
        "template", "bf", str(CHART), "--kube-version", "1.34.4",
        "--api-versions", "monitoring.coreos.com/v1",
        "--show-only", "templates/prometheusrule.yaml",
        "--set", "alerts.rules.BenchfarmBoardQuarantined.for=0s",
        "--set", "alerts.rules.BenchfarmInfraFailures.threshold=1").stdout) if d)
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [{"job_name": "benchfarm", "static_configs": [
            {"targets": [f"127.0.0.1:{devlab.PORTS.operator_metrics}"]}]}]}))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen([exe, f"--config.file={config}", f"--storage.tsdb.path={tmp_path}/data",
                             f"--web.listen-address={url[len('http://'):]}"],
                            stdout=log, stderr=subprocess.STDOUT)

    def get(path: str) -> dict:
        with urllib.request.urlopen(f"{url}{path}", timeout=5) as r:
            return json.loads(r.read())["data"]

    def firing() -> list[dict]:
        return [a["labels"] for a in get("/api/v1/alerts")["alerts"] if a["state"] == "firing"]
    try:
        wait_for("Prometheus to scrape the operator", lambda: devlab.http_ok(f"{url}/-/ready") and
                 get("/api/v1/query?query=benchfarm_leader")["result"], timeout=60)
        yield firing
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@pytest.fixture
def quarantined(custom):
    """BOARD quarantined by a run whose boots panic (one board fault quarantines, a 5 s
    cooldown); the fault stays on until the test lifts it, the board back in service after."""
    policy = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LabPolicy",
              "metadata": {"name": "default"},
              "spec": {"quarantineAfterFailures": 1, "quarantineCooldownSeconds": 5}}
    apply(yaml.safe_dump(policy))
    time.sleep(2)
    wait_for(f"{BOARD} Idle", lambda: board_status(custom).get("state") == "Idle", timeout=300)
    fault(INDEX, "panic")
    try:
        name = unique("health")
        apply(run_yaml(name, plan="demo", bootCycles=1, selector={"board": BOARD}))
        run = finished(custom, name, timeout=300)
        st = board_status(custom)
        assert run["phase"] == "Failed" and run.get("attempts") == 1, run
        assert st["state"] == "Quarantined", st
        yield st
    finally:
        fault(INDEX, "none")
        wait_for(f"{BOARD} back in service", lambda: board_status(custom).get("state") == "Idle",
                 timeout=240, every=1)
        devlab.apply_lab_policy()


def test_a_failing_health_check_is_a_session_of_its_own_and_the_board_stays_quarantined(
        custom, prometheus, quarantined):
    alerts = wait_for("the quarantine's alerts firing", lambda: (a := prometheus()) and {
        x["alertname"] for x in a} >= {"BenchfarmBoardQuarantined", "BenchfarmInfraFailures"}
        and a, timeout=60, every=1)
    assert {"alertname": "BenchfarmBoardQuarantined", "severity": "warning", "job": "benchfarm",
            "instance": f"127.0.0.1:{devlab.PORTS.operator_metrics}",
            "state": "Quarantined"} in alerts, alerts
    assert {"alertname": "BenchfarmInfraFailures", "severity": "warning", "party": "board"} \
        in alerts, alerts
    assert not {a["alertname"] for a in alerts} & {"BenchfarmNoLeader", "BenchfarmOperatorAbsent",
                                                    "BenchfarmStoreUnreachable"}, alerts
    first = int((quarantined.get("healthCheck") or {}).get("check") or 0)
    failed_before = len(events(custom, "HealthCheckFailed"))
    with ConsoleWatch() as watch:
        end = wait_for("a failed health check", lambda: (
            lambda e: e if e and e["check"] > first and e["verdict"] == "Failed" else None)(
                board_status(custom).get("healthCheckEnd")), timeout=240, every=0.5)
        wait_for("HealthCheckFailed", lambda: len(events(custom, "HealthCheckFailed")) >
                 failed_before, timeout=30)
    st = board_status(custom)
    assert st["state"] == "Quarantined" and st["reason"].startswith("health check failed: "), st
    assert end["reason"] and end["reason"] != "HealthCheckLost", end     # the boot's own verdict
    # every namespace reads the Board: the lab's words for the failure, never a console line
    from benchfarm.api.outcomes import fault_words
    assert end["message"] == fault_words(end["reason"]), end
    assert st["reason"] == f"health check failed: {fault_words(end['reason'])}", st
    # the check ran in a session process, which had the console; the operator never did
    assert watch.sessions_connected, (watch.sessions_seen, watch.port)
    assert watch.operator not in watch.sessions_seen
    assert watch.operator_connected == 0
    log = next((devlab.STATE / "logs" / "sessions").glob(f"health.{BOARD}.check-{end['check']}.log"))
    text = log.read_text()
    assert re.search(rf"health check {end['check']} of {BOARD}: session \S+/\d+ holds its Lease",
                     text), text[-2000:]


def test_a_passing_health_check_returns_the_board_to_service(custom, quarantined):
    passed_before = len(events(custom, "HealthCheckPassed"))
    fault(INDEX, "none")
    with ConsoleWatch() as watch:
        wait_for(f"{BOARD} back in service", lambda: board_status(custom).get("state") == "Idle",
                 timeout=240, every=0.5)
    st = board_status(custom)
    assert st["healthCheckEnd"]["verdict"] == "Passed", st
    assert st["healthCheckEnd"]["check"] == st["healthCheck"]["check"]
    assert st["consecutiveInfraFailures"] == 0 and not st.get("reason"), st
    assert watch.sessions_connected and watch.operator_connected == 0
    wait_for("HealthCheckPassed", lambda: len(events(custom, "HealthCheckPassed")) > passed_before,
             timeout=30)
    # its Lease went with it; its place is free
    from kubernetes import client
    leases = client.CoordinationV1Api(custom.api_client).list_lease_for_all_namespaces(
        label_selector="benchfarm.io/health-check=true").items
    assert not [lease for lease in leases if lease.spec.holder_identity], leases


@pytest.mark.full   # make test: a health check's session that passes, one that fails
def test_a_health_check_whose_session_is_killed_is_given_up_and_retried_after_the_cooldown(
        custom, quarantined):
    first = int((quarantined.get("healthCheck") or {}).get("check") or 0)
    lost_before = [e.message for e in events(custom, "HealthCheckFailed")]
    fault(INDEX, "none")            # the next check would pass: it is killed in the middle
    with ConsoleWatch() as watch:
        victim = wait_for("a health check's session on the console",
                          lambda: next(iter(watch.sessions_connected), None), timeout=120,
                          every=0.05)
        killed_check = board_status(custom)["healthCheck"]["check"]
        assert killed_check > first
        os.kill(victim, signal.SIGKILL)
        wait_for("the killed check given up", lambda: any(
            "HealthCheckLost" in e.message and e.message not in lost_before
            for e in events(custom, "HealthCheckFailed")), timeout=150, every=1)
        wait_for(f"{BOARD} back in service", lambda: board_status(custom).get("state") == "Idle",
                 timeout=180, every=0.5)
    st = board_status(custom)
    assert st["healthCheck"]["check"] > killed_check, st             # a new check, its own
    assert st["healthCheckEnd"] == {**st["healthCheckEnd"], "check": st["healthCheck"]["check"],
                                    "verdict": "Passed"}, st
    assert watch.operator_connected == 0
    from tests.stack.runs import place_acquired
    assert place_acquired(BOARD) is None        # the killed check's lock was released
