"""BoardLeases on the real stack (issue 26): a person's board through the same fair queue as runs.

Runs of two namespaces queue for one board; a lease of a third is granted in the round-robin
order (before a run queued earlier than it); the person drives the board with `labgrid-client` as
the lease's labgrid user (a power cycle, the console seen through microcom); the lease ends on
time with the board switched off (the virtual PDU's outlet, sampled), and the next queued run
starts within 2 s of the release. A lease survives an operator kill -9 and a coordinator restart
(its lock is taken back); one over the namespace's maximum is refused at apply.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import urllib.request
import uuid
from datetime import datetime

import pexpect
import pytest
import yaml

import benchfarm_devlab as devlab
from benchfarm.lab.coordinator import Coordinator
from benchfarm.lab.labgrid_pki import expiry, grant_uris
from benchfarm.settings import Settings
from tests.stack.conftest import apply, off_owner_writes, wait_for
from tests.stack.runs import (
    GROUP,
    VERSION,
    Person,
    PersonLock,
    finished,
    outlet_on,
    run_yaml,
    seen_held,
    status,
    ts,
)

pytestmark = pytest.mark.stack

BOARD = "vb-x86-1"
LABGRID_CLIENT = str(devlab.VENV_BIN / "labgrid-client")    # the venv's: make test does not put it on PATH
# labgrid's own client as a person runs it (a lease shell's `labgrid-client`): every ssh it
# starts, to the exporter hosts the boards' consoles and power are behind, with BENCHFARM_SSH_CONFIG
STOCK_CLIENT = [str(devlab.VENV_BIN / "python"), "-m", "benchfarm.lab.labgrid_forward",
                "--stock-client"]
PLAN = """
apiVersion: benchfarm.io/v1alpha1
kind: TestPlan
metadata: {name: stacktest-lease}
spec:
  suites:
    - {name: uname, suite: shell, command: uname -r, timeoutSeconds: 30}
"""


@pytest.fixture(scope="module")
def lab_ns(kube, operator):
    """Three fresh namespaces (never served: the round-robin starts even) and a LabPolicy that
    lets the third lease for at most 60 s, warned 4 s before the end; put back afterwards."""
    from kubernetes import client
    suffix = uuid.uuid4().hex[:5]
    names = [f"lease-{x}-{suffix}" for x in "abc"]
    for ns in names:
        client.CoreV1Api(kube).create_namespace({"metadata": {"name": ns}})
    apply(PLAN)
    lease_policy(names[2])
    yield names
    devlab.lab.apply_lab_policy()


def lease_policy(ns):
    """`ns` may lease for 60 s at most, warned 4 s before the end (the lab's policy otherwise)."""
    policy = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LabPolicy",
              "metadata": {"name": "default"},
              "spec": {"leaseWarningSeconds": 4, "namespaces": [
                  {"namespace": ns, "leases": {"allowed": True, "maxLeaseSeconds": 60}}]}}
    apply(yaml.safe_dump(policy))
    time.sleep(1)       # the operator's watch (the admission policy reads it at once)


def at(iso):
    """A time the lease's end session wrote (milliseconds), as seconds since the epoch."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def lease_yaml(name, ns, duration, selector=None, user="desk/carol", **spec):
    return yaml.safe_dump({"apiVersion": f"{GROUP}/{VERSION}", "kind": "BoardLease",
                           "metadata": {"name": name, "namespace": ns},
                           "spec": {"selector": selector or {"board": BOARD},
                                    "duration": duration, "user": user, **spec}})


def lease(custom, name, ns):
    return custom.get_namespaced_custom_object(GROUP, VERSION, ns, "boardleases", name)


def lease_status(custom, name, ns):
    return lease(custom, name, ns).get("status") or {}


def events(custom, name, ns):
    from kubernetes import client
    return [e.reason for e in client.CoreV1Api(custom.api_client).list_namespaced_event(
        ns, field_selector=f"involvedObject.name={name}").items]


@pytest.fixture(scope="module")
def custom(kube):
    from kubernetes import client
    return client.CustomObjectsApi(kube)


class Outlet:
    """The board's outlet on the virtual PDU, sampled every 50 ms: (monotonic, on)."""

    def __init__(self, place):
        self.place, self.samples, self.stop = place, [], threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self):
        while not self.stop.is_set():
            self.samples.append((time.monotonic(), outlet_on(self.place)))
            time.sleep(0.05)

    def off_between(self, t0, t1):
        return any(not on for t, on in self.samples if t0 <= t <= t1)

    def close(self):
        self.stop.set()
        self.thread.join()


def test_a_lease_is_granted_in_fair_queue_order_driven_and_ended_on_time(custom, lab_ns, tmp_path):
    ns_a, ns_b, ns_c = lab_ns
    person_key = Person(tmp_path / "carol")
    runs = {"a1": ns_a, "b1": ns_b, "a2": ns_a}
    with PersonLock(BOARD) as person:     # everything queues behind a person's own lock
        seen_held(custom, BOARD)
        apply(run_yaml("a1", ns_a, plan="stacktest-lease", selector={"board": BOARD}))
        apply(run_yaml("a2", ns_a, plan="stacktest-lease", selector={"board": BOARD}))
        time.sleep(1.1)                   # creation times a second apart: the order is theirs
        apply(run_yaml("b1", ns_b, plan="stacktest-lease", selector={"board": BOARD}))
        time.sleep(1.1)
        apply(lease_yaml("hold", ns_c, "25s", publicKey=person_key.public_key))
        st = wait_for("the lease's position", lambda: (
            s if (s := lease_status(custom, "hold", ns_c)).get("queuePosition") == 3 else None),
            timeout=30)
        # a1, b1, then the lease (its namespace's turn), then a2 (queued before it)
        assert st["phase"] == "Pending" and st["queuePosition"] == 3, st
        assert st.get("estimatedStart") is None     # a person's own lock: nobody can say
        person.release()
        # the person's pace: the test samples the lease and the next run 10 times a second
        granted = wait_for("the lease granted", lambda: (
            s if (s := lease_status(custom, "hold", ns_c)).get("phase") == "Granted" else None),
            timeout=240, every=0.2)
    outlet = Outlet(BOARD)
    try:
        done = {n: status(custom, n, ns) for n, ns in runs.items()}
        # a1 and b1 had the board first (done with it: finished, or still uploading)
        assert all(done[n].get("startTime") and (done[n]["phase"] == "Succeeded" or
                                                  done[n].get("boardReleased")) for n in
                   ("a1", "b1")), done
        assert done["a2"]["phase"] == "Pending", done      # queued before the lease, after it
        assert granted["place"] == BOARD
        # the coordinator's address is not handed out: the lease's certificate is the way in
        assert "LG_COORDINATOR" not in granted["commands"]["env"], granted["commands"]
        access = granted["access"]
        assert expiry(access["certificate"]) == datetime.fromisoformat(
            granted["expiresAt"].replace("Z", "+00:00")), (access, granted["expiresAt"])
        assert grant_uris(access["certificate"].encode()) == ["labgrid:person:desk/carol"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_LABGRID")}
        env = {**env, **granted["commands"]["env"], "LG_COORDINATOR": person_key.connect(access)}
        assert env["LG_HOSTNAME"] == "desk" and env["LG_USERNAME"] == "carol"
        uid = lease(custom, "hold", ns_c)["metadata"]["uid"]
        show = subprocess.run([*STOCK_CLIENT, "-p", BOARD, "show"], env=env,
                              capture_output=True, text=True, timeout=30).stdout
        assert f"acquired: benchfarm/lease-{uid}" in show and "allowed: desk/carol" in show, show

        # the person: the console open (microcom under a pty), then a power cycle
        console = pexpect.spawn(STOCK_CLIENT[0], [*STOCK_CLIENT[1:], "-p", BOARD, "console"], env=env,
                                timeout=40, encoding="utf-8", codec_errors="replace")
        try:
            console.expect("connected to")
            cycle = subprocess.run([*STOCK_CLIENT, "-p", BOARD, "power", "cycle"], env=env,
                                   capture_output=True, text=True, timeout=30)
            assert cycle.returncode == 0, cycle.stderr
            console.expect(r"Linux version|login:")     # the board boots on the person's console
        finally:
            console.close(force=True)
        # someone else, not allowed on the place, may not drive it: not even with the person's
        # certificate, which is desk/carol's and no one else's
        other = subprocess.run([*STOCK_CLIENT, "-p", BOARD, "power", "off"],
                               env={**env, "LG_USERNAME": "mallory"}, capture_output=True,
                               text=True, timeout=30)
        assert other.returncode != 0 and outlet_on(BOARD), other

        # the end, on time: off, released, and the next run on the board within 2 s
        expires = ts(granted["expiresAt"])
        wait_for("the warning", lambda: "LeaseExpiring" in events(custom, "hold", ns_c),
                 timeout=30)
        released = wait_for("the lease's end", lambda: (
            time.monotonic() if lease_status(custom, "hold", ns_c).get("leaseEnd") else None),
            timeout=60, every=0.1)
        running = wait_for("a2 running", lambda: (
            time.monotonic() if status(custom, "a2", ns_a).get("phase") == "Running" else None),
            timeout=30, every=0.1)
        running_wall = time.time()
    finally:
        outlet.close()
        person_key.close()
    st = wait_for("the lease Ended", lambda: (
        s if (s := lease_status(custom, "hold", ns_c)).get("phase") == "Ended" else None),
        timeout=30)
    assert st["leaseEnd"]["poweredOff"] is True, st
    assert expires <= at(st["leaseEnd"]["at"]) <= expires + 3, st     # on time
    assert outlet.off_between(released - 5, running), "the board was never seen off"
    # from the place's release (the end session's clock) to the test seeing a2 Running
    gap = running_wall - at(st["leaseEnd"]["at"])
    print(f"lease expiry -> released {at(st['leaseEnd']['at']) - expires:.2f} s; "
          f"released -> next run seen Running {gap:.2f} s")
    assert gap < 2.0, gap
    assert {"Queued", "Granted", "LeaseExpiring", "Expired", "PoweredOff"} <= \
        set(events(custom, "hold", ns_c))
    assert all(finished(custom, n, ns)["phase"] == "Succeeded" for n, ns in runs.items())
    metrics = urllib.request.urlopen(
        f"http://127.0.0.1:{devlab.PORTS.operator_metrics}/metrics").read().decode()
    values = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines()
              if line.startswith("benchfarm_leases_")}
    assert values["benchfarm_leases_granted_total"] >= 1, values
    assert values["benchfarm_leases_expired_total"] >= 1, values
    assert values['benchfarm_leases_ended_total{reason="Expired"}'] >= 1, values
    assert values["benchfarm_leases_active"] == 0, values


def test_a_lease_outlives_an_operator_kill_and_a_coordinator_restart(custom, lab_ns):
    ns_c = lab_ns[2]
    apply(lease_yaml("survivor", ns_c, "40s", selector={"board": "vb-x86-0"}))
    granted = wait_for("the lease granted", lambda: (
        s if (s := lease_status(custom, "survivor", ns_c)).get("phase") == "Granted" else None),
        timeout=120, every=0.2)
    holder = f"benchfarm/lease-{lease(custom, 'survivor', ns_c)['metadata']['uid']}"
    pid = devlab.running_pid("benchfarm-operator")
    os.kill(pid, signal.SIGKILL)
    devlab.stop_process("labgrid-coordinator")      # forgets every lock
    devlab.up()
    devlab.start_operator()      # (puts the lab's own LabPolicy back)
    lease_policy(ns_c)

    def held():
        c = Coordinator.from_settings(Settings.from_env(), user="pytest", host="lease")
        try:
            return c.places()["vb-x86-0"].acquired == holder
        finally:
            c.close()
    wait_for("the lock taken back", held, timeout=30)
    assert time.time() < ts(granted["expiresAt"]), "the test was too slow to show anything"
    assert lease_status(custom, "survivor", ns_c)["phase"] == "Granted"
    assert "LockRetaken" in events(custom, "survivor", ns_c)
    st = wait_for("the lease Ended", lambda: (
        s if (s := lease_status(custom, "survivor", ns_c)).get("phase") == "Ended" else None),
        timeout=60)
    assert st["expiresAt"] == granted["expiresAt"], "the restart moved the expiry"
    assert ts(granted["expiresAt"]) <= at(st["leaseEnd"]["at"]) <= ts(granted["expiresAt"]) + 3
    assert st["leaseEnd"]["poweredOff"] and not outlet_on("vb-x86-0")


def test_a_lease_over_the_policy_is_refused_at_apply_with_a_clear_message(custom, lab_ns):
    ns_a, _, ns_c = lab_ns
    with pytest.raises(RuntimeError) as too_long:
        apply(lease_yaml("long", ns_c, "2m"))
    assert "longer than namespace" in str(too_long.value) and "maxLeaseSeconds" in \
        str(too_long.value) and "at most 60 s" in str(too_long.value)
    with pytest.raises(RuntimeError) as not_allowed:
        apply(lease_yaml("nope", ns_a, "10s"))
    assert f"namespace {ns_a} may not lease boards" in str(not_allowed.value)
    # a selector no board of the lab fits: refused by the operator at once
    apply(lease_yaml("typo", ns_c, "10s", selector={"deviceType": "no-such-type"}))
    st = wait_for("the lease refused", lambda: (
        s if (s := lease_status(custom, "typo", ns_c)).get("phase") == "Refused" else None),
        timeout=30)
    assert "NoMatchingBoard" in json.dumps(st)
    # an extension over the maximum is refused like the lease; releasing never is
    with PersonLock("vb-gpu-0"):          # the lease waits behind a person's own lock
        seen_held(custom, "vb-gpu-0")
        apply(lease_yaml("ext", ns_c, "30s", selector={"board": "vb-gpu-0"}))
        with pytest.raises(RuntimeError) as ext:
            apply(lease_yaml("ext", ns_c, "61s", selector={"board": "vb-gpu-0"}))
        assert "at most 60 s" in str(ext.value)
        apply(lease_yaml("ext", ns_c, "30s", selector={"board": "vb-gpu-0"}, release=True))
        st = wait_for("the waiting lease released", lambda: (
            s if (s := lease_status(custom, "ext", ns_c)).get("phase") == "Ended" else None),
            timeout=30)
    assert "Released" in json.dumps(st) and not st.get("place")


def test_benchfarm_lease_shell_releases_the_board_when_the_shell_exits(custom, lab_ns, tmp_path):
    ns_c = lab_ns[2]
    seen = tmp_path / "seen"
    shell = tmp_path / "shell"
    shell.write_text("#!/bin/sh\nlabgrid-client -p \"$LG_PLACE\" power on && "   # the shell's own
                     f"labgrid-client -p \"$LG_PLACE\" power get > {tmp_path}/power && "
                     f"env | grep ^LG_ > {seen}\n")
    shell.chmod(0o755)
    res = subprocess.run(
        [str(devlab.VENV_BIN / "benchfarm"), "lease", "--board", "vb-x86-0", "--duration", "50s",
         "--user", "desk/dave", "-n", ns_c, "--name", "cli", "--shell"],
        env={**os.environ, "SHELL": str(shell)}, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr
    assert "LG_PLACE=vb-x86-0" in seen.read_text() and "LG_USERNAME=dave" in seen.read_text()
    # labgrid-client went through the lease's own forwarder, with the lease's certificate
    assert "LG_COORDINATOR=127.0.0.1:" in seen.read_text() and \
        f"LG_COORDINATOR={os.environ['LG_COORDINATOR']}\n" not in seen.read_text()
    assert (tmp_path / "power").read_text().strip().endswith("on")
    assert "through 127.0.0.1:" in res.stderr, res.stderr
    assert "is yours until" in res.stderr and "released: vb-x86-0 powered off" in res.stderr, \
        res.stderr
    st = lease_status(custom, "cli", ns_c)
    assert st["phase"] == "Ended" and st["endReason"] == "Released" and not outlet_on("vb-x86-0")
    # a lease over the maximum: the API server's own words
    res = subprocess.run([str(devlab.VENV_BIN / "benchfarm"), "lease", "--board", "vb-x86-0",
                          "--duration", "2h", "-n", ns_c], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 1 and "at most 60 s" in res.stderr, res.stderr


def test_a_lease_s_user_is_the_person_who_made_it(custom, lab_ns, tmp_path):
    """As a tenant's person (a ServiceAccount token, no admin rights): a lease under a run's
    holder name, another person's or the lab's is refused by the API server with a clear
    message; one under their own name (what `benchfarm lease` fills in) is granted and drives
    its own board. The API server's CEL spells a name as the CLI does, for every escape."""
    from benchfarm.api.labgridusers import labgrid_name
    from tests.stack.tenants import Tenant
    ns_c = lab_ns[2]
    mallory = Tenant(ns_c, "mallory", tmp_path / "mallory")
    assert mallory.labgrid == f"system_cserviceaccount_c{ns_c}_cmallory"
    for user, words in [(f"benchfarm/run-{uuid.uuid4()}", "is the lab's own labgrid identity"),
                        (f"Benchfarm/lease-{uuid.uuid4()}", "is the lab's own labgrid identity"),
                        ("operator/benchfarm", "is the lab's own labgrid identity"),
                        ("desk/carol", f"<host>/{mallory.labgrid} for Kubernetes user "
                                       f"{mallory.username}"),
                        (f"desk/{mallory.labgrid}x", f"<host>/{mallory.labgrid}")]:
        res = mallory.kubectl("create", "-f", "-", input=lease_yaml("forged", ns_c, "30s",
                                                                   user=user))
        assert res.returncode != 0 and words in res.stderr, (user, res.stderr)
        assert "boardlease-users.benchfarm.io" in res.stderr and "denied" in res.stderr, res.stderr
    assert mallory.kubectl("get", "boardlease", "forged", "-n", ns_c).returncode != 0

    # the API server's spelling is labgrid_name's: people acted as by the admin (impersonated,
    # in a group that may lease in ns_c), each escape once
    apply(yaml.safe_dump_all([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "lease-people", "namespace": ns_c},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": "lease-person-mallory"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                       "name": "lease-people"}]}]))
    for person in ("carol", "alice@example.com", "a_b:c@d/e+f#g=h~i%j", "x.y-Z9"):
        mine = labgrid_name(person)
        for user, ok in ((f"desk/{mine}", True), (f"desk/{mine}_", False)):
            res = devlab.kubectl("create", "--dry-run=server", "-f", "-", f"--as={person}",
                                 "--as-group=lease-people", capture=True, check=False,
                                 input=lease_yaml("spelled", ns_c, "30s", user=user))
            assert (res.returncode == 0) is ok, (person, user, res.stderr)

    # their own name: granted, and their board answers them through their own certificate
    shell = tmp_path / "shell"
    shell.write_text(f"#!/bin/sh\nlabgrid-client -p \"$LG_PLACE\" power get > {tmp_path}/power"
                     f" && env | grep ^LG_ > {tmp_path}/seen\n")
    shell.chmod(0o755)
    res = subprocess.run(
        [str(devlab.VENV_BIN / "benchfarm"), "lease", "--board", "vb-x86-0", "--duration", "40s",
         "-n", ns_c, "--shell"],
        env={**mallory.env(), "SHELL": str(shell)}, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr
    assert f"LG_USERNAME={mallory.labgrid}\n" in (tmp_path / "seen").read_text()
    assert "power for place vb-x86-0 is" in (tmp_path / "power").read_text()
    assert f"/{mallory.labgrid})" in res.stderr and "released" in res.stderr, res.stderr


def test_the_lab_admins_stock_labgrid_client_works_after_sourcing_the_env(lab):
    """docs/howto/add-boards.md: `source .benchfarm/env`, then `labgrid-client` as it is. The
    coordinator takes only certificates; the env's labgrid-client runs the stock one behind a
    forwarder with the admin's certificate for that one command (nothing listens after)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BENCHFARM_", "LG_"))}
    script = (f"source {devlab.STATE / 'env'} && command -v labgrid-client && "
              f"labgrid-client places && labgrid-client -p {BOARD} show")
    res = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert str(devlab.STATE / "bin" / "labgrid-client") in res.stdout
    assert BOARD in res.stdout and f"Place '{BOARD}'" in res.stdout, res.stdout
    # the stock client alone, at the coordinator's own address: no certificate, no way in
    plain = subprocess.run(["bash", "-c", f"source {devlab.STATE / 'env'} && "
                            f"{LABGRID_CLIENT} places"], env=env, capture_output=True, text=True,
                           timeout=120)
    assert plain.returncode != 0, plain.stdout


def test_a_direct_lock_is_reported_when_the_lab_says_so(custom, lab_ns):
    policy = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LabPolicy",
              "metadata": {"name": "default"}, "spec": {"directLocks": "Report"}}
    apply(yaml.safe_dump(policy))

    def condition():
        st = custom.get_cluster_custom_object(GROUP, VERSION, "boards", "vb-x86-0").get(
            "status") or {}
        return next((c for c in st.get("conditions") or [] if c["type"] == "DirectLock"), None)
    try:
        with PersonLock("vb-x86-0"):
            c = wait_for("the DirectLock condition", lambda: (
                c if (c := condition()) and c["status"] == "True" else None), timeout=30)
            assert "desk/alice" in c["message"]
            from kubernetes import client
            evs = client.CoreV1Api(custom.api_client).list_namespaced_event(
                "default", field_selector="involvedObject.name=vb-x86-0").items
            assert any(e.reason == "DirectLock" and "desk/alice" in e.message for e in evs)
        wait_for("the condition cleared", lambda: condition()["status"] == "False", timeout=30)
    finally:
        lease_policy(lab_ns[2])


def test_no_thread_but_the_owner_changed_the_labs_records(operator):
    """After the grants, extensions, ends, deletions and forged statuses above, in this
    operator's life: every change to a lease, board or run record was the owner thread's."""
    counted = off_owner_writes()
    assert not any(counted.values()), counted
