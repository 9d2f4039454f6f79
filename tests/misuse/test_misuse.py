"""Issue 22 on the real stack: what a tenant can try against a shared lab, and what it gets.

Each test is one attempt (or one kind of attempt over every board type): a real BenchmarkRun on
the embedded lab, and checks of what a lab engineer cares about — nothing of another namespace
leaked or reached, no finished step redone and no evidence lost, no healthy board charged or
quarantined. `make misuse` prints the table (tests/misuse/conftest.py); any breach fails.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timedelta

import pytest
import yaml

import benchfarm_devlab as devlab
from benchfarm.settings import Settings
from benchfarm_devlab import labnet
from benchfarm_devlab.lab import LAB_POLICY, apply_lab_policy
from tests.conftest import FULL
from tests.stack.conftest import apply, kube, lab, operator, wait_for  # noqa: F401 (fixtures)
from tests.stack.runs import GROUP, VERSION, cond, finished, get, run_yaml, status, unique

pytestmark = pytest.mark.stack

PANIC_PLAN = """
apiVersion: benchfarm.io/v1alpha1
kind: TestPlan
metadata: {name: misuse-panic}
spec:
  suites:
    - {name: hello, suite: shell, command: 'echo bf-hello', timeoutSeconds: 30}
    - name: crash
      suite: shell
      command: 'echo bf-crash; echo c > /proc/sysrq-trigger; sleep 120'
      timeoutSeconds: 180
"""
QUICK_PLAN = """
apiVersion: benchfarm.io/v1alpha1
kind: TestPlan
metadata: {name: misuse-quick}
spec:
  suites:
    - {name: uname, suite: shell, command: uname -r, timeoutSeconds: 30}
"""
FLOOD = 1000 if FULL else 250      # runs of the flood (make misuse: BENCHFARM_FULL=1)
DEVICE_TYPES = ["qemu-x86", "qemu-arm64-a53", "qemu-x86-gpu", "qemu-x86-bench",
                "qemu-x86-sigrok"]
# the panic on every board type with make misuse; make test: the x86 one and the arm64 (U-Boot) one
PANIC_TYPES = DEVICE_TYPES if FULL else DEVICE_TYPES[:2]


@pytest.fixture(scope="module")
def custom(kube, operator):  # noqa: F811
    from kubernetes import client
    apply(PANIC_PLAN)
    apply(QUICK_PLAN)
    return client.CustomObjectsApi(kube)


def boards(custom):
    items = custom.list_cluster_custom_object(GROUP, VERSION, "boards")["items"]
    return {b["metadata"]["name"]: b.get("status") or {} for b in items}


def charged(before, after):
    return sum(max(0, (after[b].get("consecutiveInfraFailures") or 0) -
                   (s.get("consecutiveInfraFailures") or 0)) for b, s in before.items()
               if b in after)


def store():
    from benchfarm.store.artifacts import ArtifactStore, StoreConfig
    return ArtifactStore(StoreConfig.from_settings(Settings.from_env()))


def _namespace(name: str) -> None:
    from kubernetes import client
    try:
        client.CoreV1Api().create_namespace({"metadata": {"name": name}})
    except client.ApiException as exc:
        if exc.status != 409:
            raise


def _software_run(name: str, ns: str, url: str, sha256: str) -> str:
    body = yaml.safe_load(run_yaml(name, ns=ns, plan="misuse-panic",
                                   selector={"deviceType": "qemu-arm64-a53"}))
    body["spec"]["software"] = {"kernel": {"url": url, "sha256": sha256}}
    return yaml.safe_dump(body)


def test_another_namespaces_artifact_as_a_kernel_is_refused(custom, attempt):
    """Namespace `default` may boot its own software, from its own prefix and `builds/`; naming
    another tenant's result as its kernel (with a made-up digest, and with the real one) is
    refused at admission, and the refusal never shows the object's digest."""
    victim = "probe-b/secret-run/0000/metrics.json"
    data = b'{"secret": 42}\n'
    import hashlib
    import io
    s = store()
    s.client.put_object(s.config.bucket, victim, io.BytesIO(data), len(data))
    real = hashlib.sha256(data).hexdigest()
    for label, digest in (("a made-up digest", "0" * 64), ("its real digest", real)):
        name = unique("steal")
        apply(_software_run(name, "default", f"s3://{s.config.bucket}/{victim}", digest))
        st = finished(custom, name, timeout=60)
        c = cond(st)
        leaked = real in c.get("message", "") or st.get("board") is not None
        attempt(f"another namespace's object as a kernel ({label})",
                f"{st['phase']}/{c.get('reason')} at admission", leaked=leaked)
        assert st["phase"] == "Failed" and c["reason"] == "ArtifactForbidden", st
        assert not leaked and not st.get("attempts"), st


@pytest.mark.parametrize("what,url", [
    ("the lab's store over http", "http://{minio}/benchfarm-artifacts/probe-b/x/metrics.json"),
    ("the cloud metadata address", "http://169.254.169.254/latest/meta-data/"),
    ("the API server by name", "https://localhost:{api}/api")])
def test_software_from_the_labs_own_addresses_is_refused(custom, attempt, what, url):
    url = url.format(minio=os.environ["BENCHFARM_S3_ENDPOINT"],
                     api=devlab.PORTS.apiserver)
    name = unique("ssrf")
    apply(_software_run(name, "default", url, "0" * 64))
    st = finished(custom, name, timeout=60)
    attempt(f"software from {what}", f"{st['phase']}/{cond(st).get('reason')}",
            leaked=st.get("board") is not None)
    assert st["phase"] == "Failed" and cond(st)["reason"] == "ArtifactForbidden", st


def test_software_from_a_namespace_without_allow_software_is_refused(custom, attempt):
    _namespace("probe-a")
    name = unique("root")
    s = store()
    apply(_software_run(name, "probe-a", f"s3://{s.config.bucket}/probe-a/my/Image", "0" * 64))
    st = finished(custom, name, ns="probe-a", timeout=60)
    attempt("its own kernel from a namespace without allowSoftware",
            f"{st['phase']}/{cond(st).get('reason')}", leaked=st.get("board") is not None)
    assert st["phase"] == "Failed" and cond(st)["reason"] == "SoftwareNotAllowed", st


def test_an_artifact_prefix_that_climbs_out_and_a_second_lab_policy_are_refused(attempt):
    """Both are refused by the API server itself (schema and CEL): nothing reaches the
    operator."""
    for tried, text in (
            ("artifactPrefix: ../../escape",
             run_yaml(unique("climb"), artifactPrefix="../../escape")),
            ("a second LabPolicy (maxPriority 1 for everyone)",
             yaml.safe_dump({"apiVersion": f"{GROUP}/{VERSION}", "kind": "LabPolicy",
                             "metadata": {"name": "zz-probe"},
                             "spec": {"default": {"namespace": "x", "maxPriority": 1}}}))):
        with pytest.raises(RuntimeError) as refused:
            apply(text)
        why = str(refused.value).strip().splitlines()[-1]
        attempt(tried, f"refused by the API server: {why[:60]}")


def test_a_tampered_status_runs_nothing(custom, attempt):
    """Someone with `benchmarkruns/status` rewrites the suites a queued run will execute: the
    session checks the operator's signature and runs nothing."""
    name = unique("tamper")
    board = "vb-x86-1"
    custom.patch_cluster_custom_object(GROUP, VERSION, "boards", board,
                                       {"spec": {"maintenance": True}})
    try:
        apply(run_yaml(name, plan="misuse-panic", selector={"board": board}))
        wait_for(f"{name} admitted", lambda: status(custom, name).get("phase") == "Pending",
                 timeout=60)
        suites = status(custom, name)["resolvedSuites"]
        suites[0]["command"] = "echo owned > /tmp/owned"
        custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, "default", "benchmarkruns", name, {"status": {"resolvedSuites": suites}})
    finally:
        custom.patch_cluster_custom_object(GROUP, VERSION, "boards", board,
                                           {"spec": {"maintenance": False}})
    st = finished(custom, name, timeout=300)
    attempt("rewrite status.resolvedSuites of a queued run",
            f"{st['phase']}/{cond(st).get('reason')}; nothing ran",
            leaked=bool(st.get("checkpoint")))
    assert st["phase"] == "Failed" and cond(st)["reason"] == "StatusNotTrusted", st
    assert not st.get("checkpoint"), st


def test_a_plan_that_panics_the_kernel_is_the_runs_fault_on_every_board_type(custom, attempt):
    """`echo c > /proc/sysrq-trigger` in a suite: the command stops at the panic, the board's own
    image boots again, and the run fails RunCrashedBoard on its first board; no board is charged,
    quarantined or tried after it."""
    before = boards(custom)
    names = {dt: unique(f"panic-{dt.split('-', 1)[-1]}") for dt in PANIC_TYPES}
    for dt, name in names.items():
        apply(run_yaml(name, plan="misuse-panic", selector={"deviceType": dt}))
    results = {dt: finished(custom, name, timeout=600) for dt, name in names.items()}
    after = boards(custom)
    n_charged = charged(before, after)
    quarantined = [b for b, s in after.items() if s.get("state") == "Quarantined"
                   and before.get(b, {}).get("state") != "Quarantined"]
    for dt, st in results.items():
        reason = cond(st).get("reason")
        attempt(f"a suite panics the kernel ({dt})",
                f"{st.get('phase')}/{reason} after {st.get('attempts')} board(s)",
                charged=n_charged if dt == DEVICE_TYPES[0] else 0)
    assert n_charged == 0 and not quarantined, (n_charged, quarantined)
    for dt, st in results.items():
        assert st["phase"] == "Failed" and cond(st)["reason"] == "RunCrashedBoard", (dt, st)
        assert st["attempts"] == 1, (dt, st)
        assert "booted to its prompt" in cond(st)["message"], cond(st)


def test_minio_down_when_a_run_fails_loses_nothing(custom, attempt):
    """The store is down when the run fails (its suite panics the board): the run ends at once,
    and its serial log and checkpoints reach the store when it is back."""
    name = unique("fail-nostore")
    apply(run_yaml(name, plan="misuse-panic", selector={"deviceType": "qemu-x86"}))
    wait_for(f"{name} to boot", lambda: (status(custom, name).get("checkpoint") or {})
             .get("done", 0) >= 1, timeout=300, every=0.2)
    devlab.stop_process("minio")
    try:
        st = finished(custom, name, timeout=300)
        time.sleep(3)
    finally:
        devlab.up()
    uid = get(custom, name)["metadata"]["uid"]
    prefix = f"default/{name}/{uid}/"
    want = {f"{prefix}serial/attempt-001-run-00.log",
            f"{prefix}checkpoints/attempt-001/boot-001.json",
            f"{prefix}checkpoints/attempt-001/provenance.json"}

    def uploaded():
        return want <= set(store().list(prefix))
    got = wait_for("the spooled artifacts in the store", uploaded, timeout=120, every=1)
    attempt("the store is down when the run fails",
            f"{st['phase']}/{cond(st).get('reason')}; spool uploaded when the store was back",
            lost=not got)
    assert cond(st)["reason"] == "RunCrashedBoard"


def test_a_thousand_runs_from_one_namespace_against_max_boards_one(custom, attempt):
    """One namespace floods the queue with 1,000 runs under `maxBoards: 1` (250 in make test,
    the 1,000 in make misuse): it never holds more than one board, another namespace's run still
    starts and finishes, and the operator's memory stays bounded."""
    from kubernetes import client
    core = client.CoreV1Api()
    flood, other_ns = "misuse-flood", "misuse-other"
    for ns in (flood, other_ns):
        try:
            core.create_namespace({"metadata": {"name": ns}})
        except client.ApiException as exc:
            if exc.status != 409:
                raise
    old = custom.get_cluster_custom_object(GROUP, VERSION, "labpolicies", "default")
    spec = old.get("spec") or {}
    entries = [e for e in spec.get("namespaces", []) if e.get("namespace") != flood]
    policy = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LabPolicy",
              "metadata": {"name": "default"},
              "spec": {**spec, "namespaces": [{"namespace": flood, "maxBoards": 1}, *entries]}}
    apply(yaml.safe_dump(policy))
    rss_before = _operator_rss()
    try:
        t0 = time.monotonic()
        body = yaml.safe_load(run_yaml("x", ns=flood, plan="misuse-quick"))
        for i in range(FLOOD):
            body["metadata"]["name"] = f"flood-{i:04d}"
            custom.create_namespaced_custom_object(GROUP, VERSION, flood, "benchmarkruns", body)
        created = time.monotonic() - t0
        other = unique("other")
        apply(run_yaml(other, ns=other_ns, plan="misuse-quick"))
        most = 0
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            runs = custom.list_namespaced_custom_object(GROUP, VERSION, flood,
                                                        "benchmarkruns")["items"]
            holding = sum(1 for r in runs if (r.get("status") or {}).get("phase") == "Running"
                          and not (r.get("status") or {}).get("boardReleased"))
            most = max(most, holding)
            if status(custom, other, other_ns).get("phase") in ("Succeeded", "Failed"):
                break
            time.sleep(1)
        st = status(custom, other, other_ns)
        rss_after = _operator_rss()
        grown = (rss_after - rss_before) / 1024
        ok = most <= 1 and st.get("phase") == "Succeeded"
        attempt(f"{FLOOD:,} runs from one namespace, maxBoards: 1",
                f"at most {most} board held; the other namespace's run {st.get('phase')}; "
                f"operator RSS +{grown:.0f} MiB", leaked=not ok)
        assert most <= 1
        assert st.get("phase") == "Succeeded", st
        assert grown < 200, f"operator RSS grew {grown:.0f} MiB (created in {created:.0f} s)"
    finally:
        custom.delete_collection_namespaced_custom_object(GROUP, VERSION, flood, "benchmarkruns")
        apply_lab_policy()


def _operator_rss() -> int:
    """The local operator's resident memory, KiB."""
    pid = devlab.running_pid("benchfarm-operator")
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_forged_lease_grant_moves_no_board(custom, attempt):
    """A BoardLease whose status someone rewrote (phase Granted, a place, an expiry) to take a
    board past the queue, or to have benchfarm power off someone else's board at its "end": the
    grant carries no operator signature, so the lease is Ended (StatusNotTrusted), the board is
    never claimed for it and its end session never runs."""
    from datetime import UTC, datetime

    from tests.stack.runs import PersonLock, seen_held
    name, board = unique("forged"), "vb-x86-0"
    get_lease = lambda: custom.get_namespaced_custom_object(  # noqa: E731
        GROUP, VERSION, "default", "boardleases", name).get("status") or {}
    with PersonLock("vb-sigrok-0"):      # the lease waits behind a person's own lock
        seen_held(custom, "vb-sigrok-0")
        apply(yaml.safe_dump({"apiVersion": f"{GROUP}/{VERSION}", "kind": "BoardLease",
                              "metadata": {"name": name, "namespace": "default"},
                              "spec": {"selector": {"board": "vb-sigrok-0"}, "duration": "1m",
                                       "user": "desk/mallory"}}))
        wait_for(f"{name} queued", lambda: get_lease().get("phase") == "Pending", timeout=60)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, "default", "boardleases", name, {"status": {
                "phase": "Granted", "place": board, "grantedAt": now, "expiresAt": now,
                "grantSignature": "0" * 64}})
        st = wait_for(f"{name} ended", lambda: (s if (s := get_lease()).get("phase") == "Ended"
                                                else None), timeout=60)
    reason = next(c for c in st["conditions"] if c["type"] == "Granted")["reason"]
    time.sleep(3)
    run = (custom.get_cluster_custom_object(GROUP, VERSION, "boards", board).get("status")
           or {}).get("run") or ""
    ended = list((devlab.STATE / "logs" / "sessions").glob(f"lease.default.{name}.end.log"))
    attempt("rewrite a queued BoardLease's status to Granted on another board",
            f"Ended/{reason}; the board untouched", leaked=bool(ended) or name in run)
    assert reason == "StatusNotTrusted" and not ended and name not in run, (st, run)


def test_a_board_reaches_none_of_the_labs_control_endpoints(custom, attempt):
    """An inline shell suite of a tenant's run tries, from the board, every control endpoint of
    the lab at 10.0.2.2 (where QEMU's user network takes the host's loopback): the PDU, the
    coordinator, the API server, MinIO, PostgreSQL, the dashboard, the operator's probes, the
    exporters' SSH, pdudaemon and every board's console. None answers; the board's own iperf3
    peer, tried the same way, does (the probe works)."""
    ns = "probe-net"
    _namespace(ns)
    boards = devlab.load_inventory()["boards"]
    ports = {"coordinator": devlab.PORTS.coordinator,
             "API server": devlab.PORTS.apiserver, "MinIO": devlab.PORTS.minio,
             "PostgreSQL": devlab.PORTS.postgres, "dashboard": devlab.PORTS.web,
             "liveness": devlab.PORTS.operator_liveness, "metrics": devlab.PORTS.operator_metrics,
             "sshd": devlab.PORTS.sshd,
             **{f"pdudaemon {i}": devlab.PORTS.pdudaemon_base + i
                for i, b in enumerate(boards) if b.get("power") == "pdudaemon"},
             **{f"power {i}": devlab.PORTS.outlet_base + i for i in range(len(boards))},
             **{f"console {i}": devlab.PORTS.serial_base + i for i in range(len(boards))}}
    targets = " ".join(f"10.0.2.2:{p}" for p in ports.values())
    command = (f'o=; for t in {targets}; do nc -w 2 "${{t%:*}}" "${{t#*:}}" -e true '
               '</dev/null >/dev/null 2>&1 && o="$o $t"; done; echo "answered:${o:- none}"; '
               'nc -w 2 "$BENCHFARM_IPERF3_HOST" "$BENCHFARM_IPERF3_PORT" -e true </dev/null '
               '|| { echo "the peer did not answer: the probe proves nothing"; exit 3; }; '
               '[ -z "$o" ]')
    policy = json.loads(json.dumps(LAB_POLICY))       # the lab's, plus inline suites for `ns`
    policy["spec"]["namespaces"].append({"namespace": ns, "allowInlineSuites": True})
    apply(yaml.safe_dump(policy))
    try:
        time.sleep(2)
        name = unique("netprobe")
        body = yaml.safe_load(run_yaml(name, ns=ns, selector={"board": "vb-x86-0"},
                                       bootCycles=1))
        del body["spec"]["plan"]
        body["spec"]["suites"] = [{"name": "reach-the-lab", "suite": "shell",
                                   "command": command, "timeoutSeconds": 120}]
        apply(yaml.safe_dump(body))
        st = finished(custom, name, ns=ns, timeout=300)
    finally:
        apply_lab_policy()
    uid = get(custom, name, ns)["metadata"]["uid"]
    # the suite's own output, as the session stored it (the serial log echoes the command too)
    output = store().get(f"{ns}/{name}/{uid}/raw/reach-the-lab/iteration-001.txt").decode(
        errors="replace")
    said = next((m.group(0).strip() for m in re.finditer(
        r"^answered:( none|( 10\.0\.2\.2:\d+)+)\s*$", output, re.M)), "no answer line")
    breached = said != "answered: none"
    attempt("a board opens the lab's control endpoints (inline shell)",
            f"{len(ports)} endpoints at 10.0.2.2: {said[:30]}; {st['phase']}", leaked=breached)
    assert said == "answered: none", said
    assert "the peer did not answer" not in output, "the probe's own control failed"
    assert st["phase"] == "Succeeded", st


def _lab_network_listening() -> set[int]:
    """The TCP ports listening in the lab network (labnet.py), as its exporter hosts see them."""
    out = subprocess.run(["ip", "netns", "exec", labnet.NETNS, "ss", "-Hltn"], capture_output=True,
                         text=True, check=True).stdout
    return {int(line.split()[3].rsplit(":", 1)[1]) for line in out.splitlines()}


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def test_a_local_process_reaches_no_boards_console_or_power(lab, attempt, tmp_path):  # noqa: F811
    """A process on the lab's host connects straight to every port the boards' consoles and
    power switches had on the host's loopback before the lab network (the serial servers, the
    PDU, pdudaemon), and to every port listening in the lab network now (the same, each
    board's own power port, ser2net): none answers on the host. Of the lab network only two
    doors cross: the exporter hosts' SSH, which lets no one in without the lab's key or a
    lease's certificate (tried with a key of its own), and the coordinator (mutual TLS)."""
    boards = devlab.load_inventory()["boards"]
    former = {devlab.PORTS.pdu, devlab.PORTS.pdudaemon,
              *(devlab.PORTS.serial_base + i for i in range(len(boards)))}
    crossing = {devlab.PORTS.sshd, devlab.PORTS.coordinator}
    inside = _lab_network_listening() - crossing
    # the probe proves something: the boards' consoles listen there, and answer there
    consoles = {b["serial_port"] for b in json.loads(
        (devlab.STATE / "vlab" / "vlab.json").read_text())["boards"] if "serial_port" in b}
    assert consoles and consoles <= inside, (consoles, inside)
    assert labnet.run_inside(lambda: all(_answers(p) for p in consoles))
    answered = sorted(p for p in (former | inside) - crossing if _answers(p))
    key = tmp_path / "id"
    with socket.socket() as free:       # a local port for the forward it asks for
        free.bind(("127.0.0.1", 0))
        local = free.getsockname()[1]
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    ssh = subprocess.run(["ssh", "-F", "/dev/null", "-i", str(key), "-o", "IdentitiesOnly=yes",
                          "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                          "-o", "UserKnownHostsFile=/dev/null", "-p", str(devlab.PORTS.sshd),
                          "-L", f"127.0.0.1:{local}:127.0.0.1:{min(consoles)}", "root@127.0.0.1",
                          "true"],
                         capture_output=True, text=True, timeout=30)
    attempt("a local process connects straight to a board's console or power",
            f"{len(former | inside)} ports: {len(answered)} answered; own-key SSH exit "
            f"{ssh.returncode}", leaked=bool(answered) or ssh.returncode == 0)
    assert answered == [], answered
    assert ssh.returncode != 0 and "Permission denied" in ssh.stderr, ssh


# -- issue 40: the doors beside the Kubernetes API ----------------------------------------------
def _lab_leaks(text: str) -> list[str]:
    """What of the lab's insides a tenant-visible text shows: a loopback service address, a
    host path of the lab, a credential."""
    env = devlab.lab_env()
    found = [m for m in ("127.0.0.1:", "localhost:", str(devlab.STATE),
                         env["BENCHFARM_S3_SECRET_KEY"], env["BENCHFARM_SIGNING_KEY"])
             if m in text]
    return found


def _run_texts(custom, name: str, ns: str) -> str:
    """Everything a tenant reads of a run: its status' messages and its events."""
    from kubernetes import client
    st = status(custom, name, ns)
    events = client.CoreV1Api(custom.api_client).list_namespaced_event(
        ns, field_selector=f"involvedObject.name={name}").items
    return "\n".join([str(st.get("progress", "")),
                      *(c.get("message", "") for c in st.get("conditions") or []),
                      *(e.message or "" for e in events)])


def _with_hosts(ns: str, hosts: list[str]) -> None:
    """The lab's LabPolicy, with `ns` allowed software from `hosts` too (apply_lab_policy puts
    it back)."""
    policy = json.loads(json.dumps(LAB_POLICY))
    for entry in policy["spec"]["namespaces"]:
        if entry["namespace"] == ns:
            entry["softwareHosts"] = hosts
    apply(yaml.safe_dump(policy))
    time.sleep(1)       # the operator's watch


def test_the_sign_in_page_sends_a_person_nowhere_but_this_site(kube, attempt):  # noqa: F811
    """`POST /signin` with a good token and a `next` that a browser reads as another site
    (`/<TAB>/evil.example/` became `//evil.example/`): the lab's own dashboard sends the person
    to /lab; a path on the site is kept. Its 404 page names nothing of the lab."""
    from kubernetes import client

    from tests.stack.test_web import _person
    url = devlab.lab_env()["BENCHFARM_WEB_URL"]
    token = _person(client.CoreV1Api(kube), client.RbacAuthorizationV1Api(kube), "misuse-web")

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    def sign_in(nxt: str) -> tuple[int, str]:
        form = urllib.parse.urlencode({"token": token, "next": nxt}).encode()
        try:
            with urllib.request.build_opener(NoRedirect).open(urllib.request.Request(
                    url + "/signin", data=form, headers={"Origin": url}), timeout=30) as resp:
                return resp.status, ""
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers.get("Location") or ""
    tried = ["/\t/evil.example/", "//evil.example/", "/\\evil.example/", "/\n/evil.example/",
             "https://evil.example/", "/ /evil.example/", "javascript:alert(1)"]
    answers = {nxt: sign_in(nxt) for nxt in tried}
    elsewhere = [n for n, (code, where) in answers.items() if (code, where) != (303, "/lab")]
    kept = sign_in("/runs?q=x")
    attempt("sign in with next=/<TAB>/evil.example/ and 6 kin",
            f"303 to /lab for all {len(tried)}; /runs?q=x kept", leaked=bool(elsewhere))
    assert not elsewhere, {n: answers[n] for n in elsewhere}
    assert kept == (303, "/runs?q=x"), kept
    with urllib.request.urlopen(url + "/signin?" + urllib.parse.urlencode(
            {"next": "/\t/evil.example/"}), timeout=30) as resp:
        form = resp.read().decode()
    assert "evil.example" not in form and 'value="/lab"' in form, form
    req = urllib.request.Request(url + "/runs/misuse-web/nothing-here/artifacts/x.log",
                                 headers={"Authorization": f"Bearer {token}"})
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(req, timeout=30)
    body = missing.value.read().decode()
    assert missing.value.code == 404 and not _lab_leaks(body), body


def test_the_dashboards_sign_in_keeps_tokens_takes_no_foreign_form_and_slows_guessing(
        kube, attempt):  # noqa: F811
    """Issue 53: the dashboard's cookie once held the person's Kubernetes token, `POST /signin`
    took a form from any page (a page elsewhere signed a person in as someone else), and every
    guessed token cost the API server a TokenReview. A breach: the token in a Set-Cookie, a
    foreign form answered with a cookie, or a guess reviewed past the limit."""
    from kubernetes import client

    from benchfarm.web.sessions import BURST
    from tests.stack.crossns import dashboard
    from tests.stack.test_web import _person, session_cookie, sign_in_form, token_reviews
    url = devlab.lab_env()["BENCHFARM_WEB_URL"]
    token = _person(client.CoreV1Api(kube), client.RbacAuthorizationV1Api(kube), "misuse-web")

    status, headers, _ = sign_in_form(url, token)
    cookies = headers.get("set-cookie", [])
    in_cookie = [c for c in cookies if token in c or token[-32:] in c]
    attempt("read the token back from the dashboard's cookie",
            f"{status}: the cookie is a {len(session_cookie(headers))}-char. session id",
            leaked=bool(in_cookie) or not session_cookie(headers))
    assert status == 303 and session_cookie(headers) and not in_cookie, cookies

    foreign = {origin: sign_in_form(url, token, origin=origin)
               for origin in ("https://evil.example", "null", None)}
    taken = {o: a[0] for o, a in foreign.items() if a[0] != 403 or "set-cookie" in a[1]}
    attempt("sign a person in from another site (login CSRF)",
            f"403, no cookie, for {len(foreign)} origins (another, null, none)", leaked=bool(taken))
    assert not taken, taken

    with dashboard() as fresh:       # its own process: the lab's dashboard is not held back
        first = token_reviews(kube)
        guesses = [sign_in_form(fresh, f"guess-{i}")[0] for i in range(BURST)]
        before = token_reviews(kube)
        over = [sign_in_form(fresh, f"guess-more-{i}") for i in range(20)]
        reviewed = token_reviews(kube) - before
    limited = [a for a in over if a[0] == 429 and a[1].get("retry-after")]
    attempt(f"guess tokens at the sign-in form ({BURST + 20} tries)",
            f"{before - first:.0f} × 401, then {len(limited)} × 429, {reviewed:.0f} TokenReviews",
            leaked=len(limited) != 20 or reviewed > 0)
    assert guesses == [401] * BURST and before - first >= BURST, (guesses, before - first)
    assert len(limited) == 20 and reviewed == 0, (over, reviewed)


def test_a_kernel_command_line_without_a_software_grant_is_refused(custom, attempt):
    """`spec.software` with only `bootArgs` (init=/bin/sh on a shared board) from a namespace
    without allowSoftware: refused at admission like a kernel, never scheduled."""
    _namespace("probe-a")
    name = unique("bootargs")
    body = yaml.safe_load(run_yaml(name, ns="probe-a", plan="misuse-quick",
                                   selector={"deviceType": "qemu-arm64-a53"}))
    body["spec"]["software"] = {"bootArgs": "init=/bin/sh"}
    apply(yaml.safe_dump(body))
    st = finished(custom, name, ns="probe-a", timeout=60)
    attempt("bootArgs alone from a namespace without allowSoftware",
            f"{st['phase']}/{cond(st).get('reason')} at admission",
            leaked=st.get("board") is not None)
    assert st["phase"] == "Failed" and cond(st)["reason"] == "SoftwareNotAllowed", st
    assert not st.get("attempts"), st


def test_software_from_a_private_address_is_refused_before_any_connection(custom, attempt):
    """Namespace `default` may fetch from `10.1.257` (the LabPolicy lists it as a host name);
    the resolver makes it 10.1.1.1 (inet_aton's short form, no DNS query): the session refuses
    it after resolution, before connecting, with the answer any unusable URL gets. Private,
    carrier-grade NAT, NAT64 and 6to4 literals are refused at admission. Each URL is checked
    in this process first with the code the lab runs: if that let one through, the test fails
    before the lab is asked, so no packet ever leaves this host."""
    from benchfarm.api.labpolicy import NamespacePolicy
    from benchfarm.core.policy.software import SoftwareReach
    from benchfarm.errors import RunError
    from benchfarm.store.software import _checked_addresses
    literals = ["http://192.168.1.10/Image", "http://100.64.0.7/Image",
                "http://[64:ff9b::a01:101]/Image", "http://[2002:a01:101::1]/Image",
                "http://[fd00:bf::1]/Image"]
    named = "http://10.1.257/Image"
    reach = SoftwareReach(NamespacePolicy(namespace="default", allowSoftware=True,
                                          softwareHosts=["10.1.257"]),
                          "default", "benchfarm-artifacts")
    for url in literals:                       # the interlock: refused as written...
        assert reach.url_problem("kernel", url) is not None, url
    with pytest.raises(RunError):              # ...and after resolution, without connecting
        _checked_addresses("kernel", named, "10.1.257", 80, reach)
    _with_hosts("default", ["10.1.257"])
    try:
        names = {url: unique("private") for url in [named, *literals]}
        for url, name in names.items():
            apply(_software_run(name, "default", url, "0" * 64))
        results = {url: finished(custom, name, timeout=300) for url, name in names.items()}
    finally:
        apply_lab_policy()
    st = results[named]
    booted = any((s.get("checkpoint") or {}).get("done") for s in results.values())
    attempt("software from a name that resolves to 10.1.1.1",
            f"{st['phase']}/{cond(st).get('reason')} before connecting", leaked=booted)
    attempt("software from 192.168/16, 100.64/10, NAT64, 6to4, ULA",
            "Failed/" + ",".join(sorted({cond(s).get("reason") for u, s in results.items()
                                         if u != named})) + " at admission", leaked=booted)
    assert st["phase"] == "Failed" and cond(st)["reason"] == "ArtifactUnavailable", st
    assert "10.1.1.1" not in _run_texts(custom, names[named], "default")
    for url in literals:
        assert cond(results[url])["reason"] == "ArtifactForbidden", (url, results[url])
        assert not results[url].get("attempts"), results[url]


def test_the_software_cache_serves_no_file_by_its_digest_alone(custom, attempt):
    """Team B's private kernel is in the lab's software cache (a run of team B fetched it);
    namespace `default` names a URL of its own that has no such file, with that kernel's
    digest: the session downloads (and finds nothing) instead of serving B's file, and the
    run fails like any unusable URL. Nothing it reads names the lab's insides."""
    import hashlib
    import io

    from benchfarm.api.labpolicy import NamespacePolicy
    from benchfarm.api.runs import Artifact
    from benchfarm.store.software import SoftwareCache
    s = store()
    private = os.urandom(4096) + b"team B's private build"
    digest = hashlib.sha256(private).hexdigest()
    key = f"probe-b/private/{digest[:8]}/Image"
    s.client.put_object(s.config.bucket, key, io.BytesIO(private), len(private))
    cached = SoftwareCache(devlab.STATE / "software", s, policy=NamespacePolicy(
        namespace="probe-b", allowSoftware=True), namespace="probe-b",
        settings=Settings.from_env()).fetch(
        "kernel", Artifact(url=f"s3://{s.config.bucket}/{key}", sha256=digest))
    assert cached.path.read_bytes() == private
    name = unique("cachehit")
    apply(_software_run(name, "default", f"s3://{s.config.bucket}/default/nothing/Image", digest))
    st = finished(custom, name, timeout=300)
    served = bool((st.get("checkpoint") or {}).get("done")) or \
        cond(st).get("reason") != "ArtifactUnavailable"
    leaks = _lab_leaks(_run_texts(custom, name, "default"))
    attempt("another namespace's cached kernel by its digest",
            f"{st['phase']}/{cond(st).get('reason')}; not served", leaked=served or bool(leaks))
    assert st["phase"] == "Failed" and cond(st)["reason"] == "ArtifactUnavailable", st
    assert not leaks, leaks


def test_a_replayed_lease_status_with_a_new_expiry_ends_the_lease(custom, attempt):
    """A person granted a board for 10 minutes rewrites the lease's status: the operator's own
    grant, its signature kept, with an expiry a day later. The signature covers the expiry (and
    the phase, place, grant and user): the lease ends at once (StatusNotTrusted), its board is
    powered off and released, and the expiry the operator granted is what the status says."""
    from tests.stack.runs import outlet_on
    name, board = unique("replay"), "vb-x86-0"
    get_lease = lambda: custom.get_namespaced_custom_object(  # noqa: E731
        GROUP, VERSION, "default", "boardleases", name).get("status") or {}
    apply(yaml.safe_dump({"apiVersion": f"{GROUP}/{VERSION}", "kind": "BoardLease",
                          "metadata": {"name": name, "namespace": "default"},
                          "spec": {"selector": {"board": board}, "duration": "10m",
                                   "user": "desk/mallory"}}))
    granted = wait_for(f"{name} granted", lambda: (
        s if (s := get_lease()).get("phase") == "Granted" else None), timeout=180, every=0.5)
    later = (datetime.fromisoformat(granted["expiresAt"].replace("Z", "+00:00"))
             + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, "default", "boardleases", name, {"status": {
            "phase": "Granted", "place": granted["place"], "grantedAt": granted["grantedAt"],
            "grantSignature": granted["grantSignature"], "expiresAt": later}})
    st = wait_for(f"{name} ended", lambda: (
        s if (s := get_lease()).get("phase") == "Ended" else None), timeout=120, every=0.5)
    reason = next(c for c in st["conditions"] if c["type"] == "Granted")["reason"]
    board_run = (custom.get_cluster_custom_object(GROUP, VERSION, "boards", board).get("status")
                 or {}).get("run") or ""
    kept = st.get("expiresAt") == later or name in board_run
    attempt("replay a lease's signed status with a day-later expiry",
            f"Ended/{reason}; board off and released", leaked=kept)
    assert reason == "StatusNotTrusted" and not kept, (st, board_run)
    assert st["expiresAt"] == granted["expiresAt"], st
    assert st["leaseEnd"]["poweredOff"] and not outlet_on(board), st


SLOW_PLAN = """
apiVersion: benchfarm.io/v1alpha1
kind: TestPlan
metadata: {name: misuse-slow}
spec:
  suites:
    - {name: slow, suite: shell, command: 'sleep 40; echo bf-still-here', timeoutSeconds: 120}
"""


def _lease(custom, name, board, user, public_key):
    apply(yaml.safe_dump({"apiVersion": f"{GROUP}/{VERSION}", "kind": "BoardLease",
                          "metadata": {"name": name, "namespace": "default"},
                          "spec": {"selector": {"board": board}, "duration": "3m", "user": user,
                                   "publicKey": public_key}}))
    return wait_for(f"{name} granted", lambda: (
        b if ((b := custom.get_namespaced_custom_object(GROUP, VERSION, "default", "boardleases",
                                                        name)).get("status") or {}).get("phase")
        == "Granted" else None), timeout=180)


def test_a_forged_labgrid_identity_drives_nothing(custom, attempt, tmp_path):
    """A run's place is held by `benchfarm/run-<uid>` (`labgrid-client show` prints it) and a
    lease's by `benchfarm/lease-<uid>`. Whoever claims those names gets nothing: the stock
    labgrid-client at the coordinator's own address cannot connect at all (it takes only
    certificates of the lab's CA); a lease holder's own certificate is its user's and no one
    else's (a run, another lease, another lease's person); a session's certificate is its run's
    and acquires only its own board. The run Succeeds, both boards stay on."""
    from benchfarm.errors import BoardBusy, InfraError, Outage
    from benchfarm.lab.coordinator import Coordinator
    from benchfarm.lab.labgrid_compat import TlsSettings
    from tests.stack.runs import Person, outlet_on, place_acquired
    apply(SLOW_PLAN)
    run, run_board = unique("held"), "vb-x86-0"
    apply(run_yaml(run, plan="misuse-slow", selector={"board": run_board}))
    uid = get(custom, run)["metadata"]["uid"]
    wait_for(f"{run} holding {run_board}",
             lambda: place_acquired(run_board) == f"benchfarm/run-{uid}", timeout=240)
    mallory, victor = Person(tmp_path / "mallory"), Person(tmp_path / "victor")
    lease_m, lease_v = unique("mallory"), unique("victor")
    try:
        granted = _lease(custom, lease_m, "vb-x86-1", "desk/mallory", mallory.public_key)
        mallory.connect(granted["status"]["access"])
        victim = _lease(custom, lease_v, "vb-gpu-0", "desk/victor", victor.public_key)
        victor_uid = victim["metadata"]["uid"]

        # 1. the plain client, the run's own holder name, the coordinator's own address
        env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_LABGRID")}
        plain = subprocess.run(
            [str(devlab.VENV_BIN / "python"), "-m", "benchfarm.lab.labgrid_forward", "--stock-client",
             "-p", run_board, "power", "off"],
            env={**env, "LG_HOSTNAME": "benchfarm", "LG_USERNAME": f"run-{uid}"},
            capture_output=True, text=True, timeout=60)
        drove = plain.returncode == 0 or not outlet_on(run_board)
        attempt("labgrid-client as a running run's holder name", "cannot connect (no certificate)"
                if not drove else f"powered it: {plain.stdout[-60:]}", leaked=drove)
        assert not drove, plain

        # 2. a lease holder's own certificate, claiming others
        own = mallory.labgrid_client("desk/mallory", "power", "get", place="vb-x86-1")
        assert own.returncode == 0 and "power for place vb-x86-1 is" in own.stdout, own  # the way works
        for who, place in [(f"benchfarm/run-{uid}", run_board),
                           (f"benchfarm/lease-{victor_uid}", "vb-gpu-0"),
                           ("desk/victor", "vb-gpu-0")]:
            before = outlet_on(place)      # the run's board is on, a fresh lease's off: flip it
            res = mallory.labgrid_client(who, "power", "off" if before else "on", place=place)
            drove = res.returncode == 0 or outlet_on(place) != before
            attempt(f"a lease holder's certificate claiming {who.split('-')[0]}",
                    "refused (PERMISSION_DENIED)" if not drove else "drove the board",
                    leaked=drove)
            assert not drove, (who, res)

        # 3. a session's own certificate, beyond its own place: the one the lab's operator issues
        # a session of this run (its issuer, `operator.launch.credentials`), unsealed as the session does
        from benchfarm.operator.launch.credentials import SessionCredentials
        from benchfarm.operator.launch.interface import Launch
        issuing = {**devlab.operator_env(), **{k: os.environ[k] for k in (
            "BENCHFARM_LABGRID_CA", "BENCHFARM_SIGNING_KEY")}}
        creds = SessionCredentials.from_settings(Settings.from_env(issuing))
        assert creds is not None, "the lab's operator issues sessions no certificate"
        tls = TlsSettings.from_settings(Settings.from_env({**issuing, **creds.issue(
            Launch("default", run, uid, 1, 0, deadline_s=600, board=run_board))}))
        other = Coordinator(os.environ["LG_COORDINATOR"], host="benchfarm",
                            user=f"lease-{victor_uid}", tls=tls, timeout=10)
        try:
            with pytest.raises(Outage):
                other.places()
            attempt("a run's session certificate claiming a lease", "refused (PERMISSION_DENIED)")
        finally:
            other.close()
        itself = Coordinator(os.environ["LG_COORDINATOR"], host="benchfarm", user=f"run-{uid}",
                             tls=tls, timeout=10)
        try:
            for place in ("vb-bench-0", "vb-x86-1"):      # free, and mallory's lease's
                with pytest.raises((InfraError, BoardBusy)):
                    itself.acquire(place)
            with pytest.raises(InfraError, match="may not release"):
                itself.release("vb-x86-1", holder=place_acquired("vb-x86-1"))
            attempt("a run's session certificate on other boards",
                    "refused: acquires and releases its own board only",
                    leaked=place_acquired("vb-bench-0") == f"benchfarm/run-{uid}")
        finally:
            itself.close()
    finally:
        mallory.close()
        victor.close()
        for name in (lease_m, lease_v):
            custom.patch_namespaced_custom_object(GROUP, VERSION, "default", "boardleases", name,
                                                  {"spec": {"release": True}})
    st = finished(custom, run, timeout=300)
    attempt("... and the run whose name was forged", f"{st['phase']}", lost=st["phase"] != "Succeeded")
    assert st["phase"] == "Succeeded", st


@pytest.mark.full   # make misuse; make test runs the same four-four-four series in test_history_tenants
def test_a_cross_namespace_series_and_change_point(kube, operator, attempt):  # noqa: F811
    """Issue 40: team B's runs of the same inline plan between team A's (tests/stack/crossns.py:
    four of A at 1.0, four of B at 0.5, four of A) once put a ChangePoint Warning event on A's
    fifth run ("regressed +100.00 %") and B's step names in A's series menus. A breach: any
    ChangePoint event in either namespace, a run of B in A's series or a step of B's in A's
    dashboard menus (read with A's token)."""
    import json

    from tests.stack.crossns import (
        DEVICE_TYPE,
        METRIC,
        OWN_STEP,
        PLAN,
        benchfarm,
        change_point_events,
        dashboard,
        http,
        series,
    )
    made = series(kube)
    a, b = made["a"], made["b"]
    mine = json.loads(benchfarm("history", METRIC, "--device-type", DEVICE_TYPE, "--plan", PLAN,
                                "-n", a, "--format", "json").stdout)
    events = change_point_events(kube, a) + change_point_events(kube, b)
    with dashboard() as url:
        status, body = http(f"{url}/history?format=json", made["tokens"][a])
    menus = json.loads(body)["menus"]["metric"] if status == 200 else []
    foreign = [p["run"] for p in mine["series"] if not p["run"].startswith(a + "/")] + \
        [m for m in menus if m.startswith(OWN_STEP + "/")]
    leaked = bool(events or foreign or mine["changePoints"] or status != 200)
    attempt("a cross-namespace series and change point",
            f"team A: {len(mine['series'])} own runs, {len(mine['changePoints'])} change "
            f"points, {len(events)} events; B's steps in A's menus: {len(foreign)}",
            leaked=leaked)
    assert not leaked, (events, foreign, mine["changePoints"], status)


def test_a_webhook_at_the_labs_own_addresses_is_refused(custom, attempt):
    """Notifications (issue 43): a tenant names, as its webhook, the lab's API server, the cloud
    metadata address, a private address, a loopback port the lab opened for its own receivers
    (not listed for this namespace) and a name that resolves to loopback. Each Notification is
    Ready=False (WebhookForbidden) and nothing is ever queued for it: the operator posts nothing
    from inside the lab on a tenant's behalf to where the LabPolicy does not let it."""
    ns = unique("misuse-hook")
    _namespace(ns)
    urls = {"api": f"https://127.0.0.1:{devlab.PORTS.apiserver}/api",
            "metadata": "http://169.254.169.254/latest/meta-data/",
            "private": "http://10.1.2.3/hook",
            "lab-port": f"http://127.0.0.1:{devlab.PORTS.notify_receivers + 7}/hook",
            "mapped": f"http://[::ffff:127.0.0.1]:{devlab.PORTS.notify_receivers + 7}/hook",
            "name": f"http://localhost:{devlab.PORTS.notify_receivers + 7}/hook"}
    apply("---\n".join(yaml.safe_dump({
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Notification",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"events": ["RunFinished"], "webhook": {"url": url, "format": "Slack"}}})
        for name, url in urls.items()))

    def ready(name):
        st = custom.get_namespaced_custom_object(GROUP, VERSION, ns, "notifications",
                                                 name).get("status") or {}
        return cond(st, "Ready") or None
    verdicts = {name: wait_for(f"{ns}/{name} judged", lambda name=name: ready(name), timeout=60)
                for name in urls}
    from sqlalchemy import select

    from benchfarm.history import Database
    from benchfarm.history.schema import notification_outbox as t
    with Database.from_settings(Settings.from_env()).engine.connect() as conn:
        queued = conn.execute(select(t.c.id).where(t.c.namespace == ns)).all()
    refused = all(v["status"] == "False" and v["reason"] == "WebhookForbidden"
                  for v in verdicts.values())
    attempt("webhooks at the API server, 169.254.169.254, 10/8, the lab's loopback ports",
            "Ready=False/WebhookForbidden, nothing queued" if refused else str(verdicts),
            leaked=not refused or bool(queued))
    assert refused, verdicts
    assert queued == []


def _notify_policy(entries: list[dict]) -> None:
    """The lab's LabPolicy with these namespaces' entries too (apply_lab_policy puts it back)."""
    policy = json.loads(json.dumps(LAB_POLICY))
    policy["spec"]["namespaces"] += entries
    apply(yaml.safe_dump(policy))


def _slack_hook(name: str, ns: str, port: int, **spec) -> str:
    return yaml.safe_dump({
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Notification",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"events": ["RunFinished"], **(spec or {"webhook": {
            "url": f"http://127.0.0.1:{port}/hook", "format": "Slack"}})}})


def _ready(custom, name: str, ns: str) -> dict:
    return wait_for(f"{ns}/{name} judged", lambda: cond(custom.get_namespaced_custom_object(
        GROUP, VERSION, ns, "notifications", name).get("status") or {}, "Ready") or None,
        timeout=60)


def test_a_receiver_that_trickles_holds_up_no_other_namespace(custom, attempt):
    """Notifications (issue 53): a tenant's receiver reads the POST and answers a byte every
    2 s, for ever, behind ten Notifications (more deliveries at once than the operator has
    delivery threads). Each attempt is cut off at its deadline (20 s, the lab's), one at a
    time, and another namespace's delivery, due after them all, goes at once."""
    from tests.receivers import TricklingReceiver, WebhookReceiver
    slow, quick = unique("misuse-trickle"), unique("misuse-prompt")
    ports = devlab.PORTS.notify_receivers + 4, devlab.PORTS.notify_receivers + 5
    trickler = TricklingReceiver(ports[0], every=2.0).start()
    prompt = WebhookReceiver(ports[1]).start()
    try:
        for ns in (slow, quick):
            _namespace(ns)
        _notify_policy([{"namespace": slow, "webhookHosts": [f"127.0.0.1:{ports[0]}"]},
                        {"namespace": quick, "webhookHosts": [f"127.0.0.1:{ports[1]}"]}])
        apply("---\n".join([_slack_hook(f"drip-{i}", slow, ports[0]) for i in range(10)] +
                           [_slack_hook("ci", quick, ports[1])]))
        assert all(_ready(custom, f"drip-{i}", slow)["status"] == "True" for i in range(10))
        assert _ready(custom, "ci", quick)["status"] == "True"
        apply(run_yaml("drip", slow, plan="no-such-plan"))          # finishes at once
        finished(custom, "drip", slow, timeout=60)
        wait_for("the trickler's first connection", lambda: trickler.connections, timeout=30)
        time.sleep(2)
        began = time.monotonic()
        apply(run_yaml("ci", quick, plan="no-such-plan"))
        finished(custom, "ci", quick, timeout=60)
        try:
            wait_for("the other namespace's delivery", lambda: prompt.received, timeout=30)
        except AssertionError:
            pass
        waited = time.monotonic() - began
        held = wait_for("the trickler's first attempt to end", lambda: trickler.held(),
                        timeout=40)
        overlapping = max(sum(1 for c in trickler.connections if c["opened"] <= t["opened"] and
                              (c["closed"] or 1e12) > t["opened"] + 0.5)
                          for t in trickler.connections)
    finally:
        trickler.stop()
        prompt.stop()
        apply_lab_policy()
    late = not prompt.received or waited > 10
    attempt("a receiver that trickles a byte every 2 s (x10)",
            f"cut at {held[0]:.0f} s, 1 at a time; other ns in {waited:.0f} s",
            lost=late or held[0] > 24 or overlapping > 1)
    assert not late, f"the other namespace waited {waited:.1f} s"
    assert held[0] <= 24 and overlapping == 1, (held, trickler.connections)


def test_more_notifications_recipients_and_deliveries_than_the_caps(custom, attempt):
    """Notifications (issue 53): a namespace whose LabPolicy lets it 2 Notifications, 2
    recipients, the domain team.example and 1 delivery an hour asks for more: a mail to 3
    people, a third Notification, two runs' events; another namespace, whose policy lists no
    domain (the default), mails a domain of its choosing. What is over a cap is Ready=False (or
    Delivered=False, RateLimited) and nothing of it is queued: the lab's relay mails nobody the
    lab did not list."""
    from tests.receivers import WebhookReceiver
    ns, mailer = unique("misuse-caps"), unique("misuse-mailer")
    port = devlab.PORTS.notify_receivers + 6
    receiver = WebhookReceiver(port).start()
    try:
        _namespace(ns)
        _namespace(mailer)              # no entry of its own: the default lists no domain
        _notify_policy([{"namespace": ns, "webhookHosts": [f"127.0.0.1:{port}"],
                         "emailDomains": ["team.example"],
                         "notifications": {"maxNotifications": 2, "maxRecipients": 2,
                                           "maxDeliveriesPerHour": 1}}])
        apply("---\n".join([
            _slack_hook("a-hook", ns, port),
            _slack_hook("b-many", ns, port, email={"to": [f"{w}@team.example"
                                                          for w in ("x", "y", "z")]}),
            _slack_hook("c-third", ns, port, email={"to": ["boss@team.example"]})]))
        apply(_slack_hook("anywhere", mailer, port, email={"to": ["anyone@elsewhere.example"]}))
        verdicts = {name: _ready(custom, name, ns)
                    for name in ("a-hook", "b-many", "c-third")}
        verdicts["anywhere"] = _ready(custom, "anywhere", mailer)
        for run in ("one", "two"):
            apply(run_yaml(run, ns, plan="no-such-plan"))
            finished(custom, run, ns, timeout=60)
        limited = wait_for("a-hook rate-limited", lambda: (c := cond(
            custom.get_namespaced_custom_object(GROUP, VERSION, ns, "notifications",
                                                "a-hook").get("status") or {},
            "Delivered")).get("reason") == "RateLimited" and c, timeout=60)
        time.sleep(3)
        posts = len(receiver.received)
    finally:
        receiver.stop()
        apply_lab_policy()
    from sqlalchemy import select

    from benchfarm.history import Database
    from benchfarm.history.schema import notification_outbox as t
    with Database.from_settings(Settings.from_env()).engine.connect() as conn:
        queued = conn.execute(select(t.c.namespace, t.c.notification).where(
            t.c.namespace.in_([ns, mailer]), t.c.attempts > 0)).all()      # refused: none
    reasons = {k: v["reason"] for k, v in verdicts.items() if v["status"] == "False"}
    refused = reasons == {"b-many": "TooManyRecipients", "c-third": "TooManyNotifications",
                          "anywhere": "EmailDomainForbidden"}
    attempt("more Notifications/recipients/deliveries than caps",
            "Ready=False x2, RateLimited, 1 of 2 events sent" if refused else str(reasons),
            leaked=not refused or posts != 1 or len(queued) != 1)
    attempt("e-mail via the lab's relay to an unlisted domain",
            f"Ready=False/{verdicts['anywhere']['reason']}, nothing queued",
            leaked=verdicts["anywhere"]["reason"] != "EmailDomainForbidden" or
            any(r[0] == mailer for r in queued))
    assert refused, verdicts
    assert posts == 1 and [tuple(r) for r in queued] == [(ns, "a-hook")], (posts, queued)
    assert "maxDeliveriesPerHour" in limited["message"], limited


def _inline_namespace(ns: str) -> None:
    """The lab's LabPolicy, with inline suites allowed for `ns` (apply_lab_policy puts it back)."""
    _namespace(ns)
    policy = json.loads(json.dumps(LAB_POLICY))
    policy["spec"]["namespaces"].append({"namespace": ns, "allowInlineSuites": True})
    apply(yaml.safe_dump(policy))
    time.sleep(2)


def _session_pids(ns: str, name: str) -> set[int]:
    """The pids of every session the run had, from their logs (a forked session says its pid;
    every session names itself as its Lease's holder, `host/pid`)."""
    from benchfarm.settings import Settings
    pids = set()
    for log in Settings.from_env().session_logs_dir.glob(f"{ns}.{name}.attempt-*.log"):
        text = log.read_text(errors="replace")
        pids |= {int(p) for p in re.findall(r"session process (\d+) forked", text)}
        pids |= {int(p) for p in re.findall(r"session \S+/(\d+) holds the run's Lease", text)}
    return pids


def _left_running(pids: set[int]) -> list[str]:
    """`ps` lines of processes that are one of `pids` or in one of their process groups (a
    session leads its group: its parses' forkserver and children are in it)."""
    out = subprocess.run(["ps", "-eo", "pid=,pgid=,stat=,args="], capture_output=True, text=True,
                         check=True).stdout
    return [line.strip() for line in out.splitlines()
            if len(f := line.split(None, 3)) >= 3 and not f[2].startswith("Z") and
            (int(f[0]) in pids or int(f[1]) in pids)]


def test_board_output_a_parser_backtracks_on_ends_as_the_runs_fault(custom, attempt):
    """Issue 53: an inline cyclictest step printing 256 KiB of `000000`, 16,000 spaces and `x`
    (a quadratic pattern took minutes on it) held the session's GIL: its Lease went unrenewed,
    the operator resumed it four times beside the spinning old ones and failed the run with
    TooManyResumes. Now the parse runs in a child with a CPU budget (or parses linearly): the
    run ends as its own fault, in bounded time, no session process of it is left, no board
    charged. A breach: the run failed as the lab's (a dead session), a board charged, a
    session process still running after the run ended."""
    ns = "output-budget"
    _inline_namespace(ns)
    name = unique("backtrack")
    command = ('l="000000$(printf "%16000s" "")x"; i=0; while [ $i -lt 16 ]; do echo "$l"; '
               'i=$((i + 1)); done')
    before = boards(custom)
    try:
        body = yaml.safe_load(run_yaml(name, ns=ns, plan=None, bootCycles=1, iterations=1))
        body["spec"]["suites"] = [{"name": "latency", "suite": "cyclictest", "command": command,
                                   "timeoutSeconds": 120}]
        t = time.monotonic()
        apply(yaml.safe_dump(body))
        st = finished(custom, name, ns=ns, timeout=420)
        took = time.monotonic() - t
    finally:
        apply_lab_policy()
    from benchfarm.api.outcomes import Blame, blame
    c = cond(st)
    pids = _session_pids(ns, name)
    assert pids, "no session pid found in the run's session logs"
    deadline = time.monotonic() + 60       # a session ends once its Lease is released
    while (left := _left_running(pids)) and time.monotonic() < deadline:
        time.sleep(1)
    after = boards(custom)
    own = st["phase"] == "Failed" and blame(c.get("reason", "")) == Blame.run
    attempt("a cyclictest step prints 256 KiB a parser backtracks on",
            f"{st['phase']}/{c.get('reason')} in {took:.0f} s, resumes {st.get('resumes', 0)}, "
            f"{len(left)} process(es) left",
            lost=not own or bool(left), charged=charged(before, after))
    assert own, st
    assert c["reason"] != "TooManyResumes" and not st.get("resumes"), st
    assert took < 360, took
    assert not left, left
    assert charged(before, after) == 0


def test_a_step_printing_more_metrics_than_the_cap_keeps_none(custom, attempt):
    """Issue 53: one inline console-timing step printing 50,000 lines made 100,000 metrics in
    one metrics.json (the indexer, the exports and the dashboard load it whole; the operator's
    RSS grew by 150 MiB). Now the run's metrics are capped (LabPolicy maxMetricsPerRun): the
    step fails the run with TooManyMetrics and none of its metrics reach metrics.json or the
    results history. A breach: the run Succeeded, a metrics.json, or a row in the history."""
    ns = "metric-budget"
    _inline_namespace(ns)
    name = unique("metricflood")
    command = 'i=0; while [ $i -lt 50000 ]; do echo "k_$i $i"; i=$((i + 1)); done'
    try:
        body = yaml.safe_load(run_yaml(name, ns=ns, plan=None, bootCycles=1, iterations=1))
        body["spec"]["suites"] = [{"name": "timing", "suite": "console-timing",
                                   "command": command, "parameters": {"clockMHz": "100"},
                                   "timeoutSeconds": 300}]
        apply(yaml.safe_dump(body))
        st = finished(custom, name, ns=ns, timeout=600)
    finally:
        apply_lab_policy()
    c = cond(st)
    uid = get(custom, name, ns)["metadata"]["uid"]
    keys = store().list(f"{ns}/{name}/{uid}/")
    documents = [k for k in keys if k.endswith(("metrics.json", "report.md"))]
    series = subprocess.run([str(devlab.VENV_BIN / "benchfarm"), "history", "timing/k_1-cycles",
                             "-n", ns, "--device-type", "qemu-x86", "--plan", "(inline)",
                             "--format", "json"], capture_output=True, text=True, env=os.environ)
    indexed = f"{ns}/{name}" in series.stdout
    capped = st["phase"] == "Failed" and c.get("reason") == "TooManyMetrics"
    attempt("a console-timing step prints 50,000 timing lines",
            f"{st['phase']}/{c.get('reason')}, {len(documents)} result document(s), "
            f"{'indexed' if indexed else 'nothing indexed'}",
            lost=not capped or bool(documents) or indexed)
    assert capped, st
    assert "maxMetricsPerRun" in c["message"] and "100000 metrics" in c["message"], c
    assert not documents, documents
    assert not indexed, series.stdout[-2000:]
    assert any(k.endswith("raw/timing/iteration-001.txt") for k in keys), keys  # its output


HELLO_PLAN = """
apiVersion: benchfarm.io/v1alpha1
kind: TestPlan
metadata: {name: misuse-hello}
spec:
  suites:
    - {name: hello, suite: shell, command: 'echo bf-hello', timeoutSeconds: 30}
"""


def _init_of(initramfs: bytes) -> str:
    """The /init script of an initramfs (a board image's: cpio, as the image builder packs it)."""
    return subprocess.run(["cpio", "-i", "--quiet", "--to-stdout", "init"], input=initramfs,
                          capture_output=True, check=True).stdout.decode()


def _newc(files: dict[str, bytes]) -> bytes:
    """A cpio archive (newc, what the kernel's initramfs unpacker reads) of plain files."""
    out = bytearray()
    for ino, (name, data) in enumerate([*files.items(), ("TRAILER!!!", b"")], start=0x4200):
        path = name.encode() + b"\0"
        mode = 0o100755 if data else 0
        out += b"070701" + "".join(f"{v:08X}" for v in (
            ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(path), 0)).encode()
        out += path + b"\0" * (-(110 + len(path)) % 4)
        out += data + b"\0" * (-len(data) % 4)
    return bytes(out)


def test_tenant_software_that_prints_a_panic_marker_outside_its_suites_charges_no_board(
        custom, attempt):
    """Issue 53: a tenant initramfs whose `uname` prints the device type's panic marker made
    the provenance probe's `uname -a` look like the board crashing (BoardCrashed): the board
    was charged, the run moved on to the next board, and two such runs quarantined it. Now the
    board's own image is booted to its prompt after each fault (a health check): it does, so
    the run fails as its own doing, on its first board. A breach: a board charged, the run
    moved, or the tenant's line on the Board every namespace reads."""
    import hashlib
    tag = unique("team-b-build")
    said = f"Kernel panic - not syncing: {tag}"
    own = (devlab.STATE / "tftp" / "vb-a53-0" / "initramfs.cpio").resolve().read_bytes()
    # the board's own initramfs, and after it an archive (the kernel unpacks one after the
    # other) with the tenant's /init: the board's own, naming the board with the marker, so
    # `uname -a` (the provenance probe's) prints it; its prompt names the board as before
    init = _init_of(own)
    hostname = 'hostname "$(sed -n \'s/.*benchfarm.board=\\([^ ]*\\).*/\\1/p\' /proc/cmdline)"'
    prompt = "export PS1='root@\\h:\\w# '"
    assert hostname in init and prompt in init, init
    init = init.replace(hostname, f"hostname '{said}'").replace(
        prompt, "export PS1='root@vb-a53-0:\\w# '")
    initrd = own + b"\0" * (-len(own) % 4) + _newc({"init": init.encode()})
    digest = hashlib.sha256(initrd).hexdigest()
    s = store()
    s.put(f"default/misuse-builds/{tag}/initrd", initrd)
    apply_lab_policy()                      # namespace default may boot its own software
    name = unique("panicprobe")
    before = boards(custom)
    apply(HELLO_PLAN)                       # its suites print nothing of the sort
    apply(run_yaml(name, ns="default", plan="misuse-hello",
                   selector={"deviceType": "qemu-arm64-a53"}, bootCycles=1, iterations=1,
                   software={"initrd": {"url": f"s3://{s.config.bucket}/default/misuse-builds/"
                                               f"{tag}/initrd", "sha256": digest}}))
    st = finished(custom, name, timeout=900)
    wait_for("vb-a53-0 idle again", lambda: boards(custom)["vb-a53-0"].get("state") == "Idle",
             timeout=120)
    after = boards(custom)
    c = cond(st)
    board = after["vb-a53-0"]
    on_board = [v for v in (board.get("reason"), json.dumps(board.get("healthCheckEnd") or {}))
                if v and tag in v]
    attempt("tenant software that prints a panic marker outside its suites",
            f"{st['phase']}/{c.get('reason')} after {st.get('attempts')} attempt(s)",
            leaked=bool(on_board), charged=charged(before, after))
    assert st["phase"] == "Failed" and c["reason"] == "RunCrashedBoard", st
    assert "provenance probe" in c["message"] and tag in c["message"], c   # the run's own
    assert st.get("attempts") == 1 and not st.get("avoidBoards"), st      # not moved on
    assert charged(before, after) == 0 and board.get("state") != "Quarantined", board
    assert not on_board, board


def test_a_teams_store_credential_reaches_no_other_namespace_and_not_builds(
        operator, attempt, tmp_path):  # noqa: F811
    """Issue 53 item 1: a team holds its kubeconfig, and through it its namespace's own store
    credential (the Secret benchfarm-store), never the lab's. With it: another namespace's run
    results and builds, and the lab's `builds/` kernels and their SHA256SUMS (which every
    namespace with `softwareSources: [builds/]` boots), read or written, answer AccessDenied."""
    import io
    import uuid

    from benchfarm.store.artifacts import ArtifactStore, StoreConfig
    from tests.stack.citenant import CiTenant, denied, let_in
    tag = uuid.uuid4().hex[:5]
    team, other = CiTenant(f"misuse-st-{tag}", tmp_path / "a"), CiTenant(
        f"misuse-sv-{tag}", tmp_path / "b")
    let_in({"namespace": team.ns}, {"namespace": other.ns})
    try:
        lab_store = ArtifactStore(StoreConfig.from_settings(Settings.from_env()))
        bucket = lab_store.config.bucket
        metrics = f"{other.ns}/run/uid/metrics.json"
        lab_store.put(metrics, b'{"metrics": []}')
        s3 = team.store()
        read = denied(lambda: s3.get_object(bucket, metrics))
        wrote = denied(lambda: s3.put_object(bucket, metrics, io.BytesIO(b"{}"), 2))
        listed = denied(lambda: list(s3.list_objects(bucket, prefix=f"{other.ns}/")))
        attempt("another namespace's objects with a team's store credential",
                f"read {read}, write {wrote}, list {listed}",
                leaked="allowed" in (read, listed), lost=wrote == "allowed")
        assert (read, wrote, listed) == ("AccessDenied",) * 3
        sums = "builds/qemu-arm64/debian-arm64/SHA256SUMS"
        before = lab_store.get(sums)
        kernel = denied(lambda: s3.put_object(bucket, "builds/qemu-arm64/debian-arm64/vmlinuz",
                                              io.BytesIO(b"evil"), 4))
        digest = denied(lambda: s3.put_object(bucket, sums, io.BytesIO(b"0" * 64), 64))
        attempt("a kernel under builds/ from a team", f"kernel {kernel}, SHA256SUMS {digest}",
                lost=lab_store.get(sums) != before or "allowed" in (kernel, digest))
        assert (kernel, digest) == ("AccessDenied",) * 2 and lab_store.get(sums) == before
        res = team.kubectl("get", "secret", "benchfarm-store", "-n", other.ns)
        attempt("another namespace's store credential with a team's token",
                "Forbidden" if "Forbidden" in res.stderr else res.stderr[:52],
                leaked=res.returncode == 0)
        assert res.returncode != 0 and "Forbidden" in res.stderr
    finally:
        apply_lab_policy()


def test_a_lease_under_someone_elses_labgrid_name_is_refused_at_apply(custom, attempt, tmp_path):
    """A tenant's person names, as their lease's labgrid user, the holder `labgrid-client
    places` shows for a live run (`benchfarm/run-<uid>`) or another person's live lease: the
    API server refuses both (a lease's user is its creator's own name). Their own name is
    taken."""
    from tests.stack.tenants import Tenant
    run = unique("named")
    apply(run_yaml(run, plan="misuse-quick"))
    uid = get(custom, run)["metadata"]["uid"]
    victor = Tenant("default", "misuse-victor", tmp_path / "victor")
    mallory = Tenant("default", "misuse-mallory", tmp_path / "mallory")

    def lease(who, name, user):
        return who.kubectl("create", "-f", "-", input=yaml.safe_dump({
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "BoardLease",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"deviceType": "qemu-x86"}, "duration": "2m", "user": user}}))
    own = unique("victor")
    try:
        made = lease(victor, own, f"desk/{victor.labgrid}")
        assert made.returncode == 0, made.stderr          # the way works: a person's own name
        for tried, user in (("a lease as a live run's holder benchfarm/run-<uid>",
                             f"benchfarm/run-{uid}"),
                            ("a lease as another person's live lease's user",
                             f"desk/{victor.labgrid}")):
            name = unique("forged")
            res = lease(mallory, name, user)
            made = res.returncode == 0
            if made:
                custom.delete_namespaced_custom_object(GROUP, VERSION, "default", "boardleases",
                                                       name)
            why = ("the lab's own identity" if "the lab's own labgrid identity" in res.stderr
                   else "not its creator's name" if "its creator's own" in res.stderr
                   else res.stderr.strip()[-40:])
            attempt(tried, f"refused by the API server: {why}" if not made
                    else "granted a lease under that name", leaked=made)
            assert not made and "boardlease-users.benchfarm.io" in res.stderr, res
    finally:
        custom.patch_namespaced_custom_object(GROUP, VERSION, "default", "boardleases", own,
                                              {"spec": {"release": True}})
    st = finished(custom, run, timeout=300)
    assert st["phase"] == "Succeeded", st


def test_a_run_asking_for_a_longer_timeout_than_its_namespace_may_is_refused(custom, attempt):
    """`timeoutSeconds` is the longest a run holds a board: a namespace whose LabPolicy caps it
    (maxTimeoutSeconds) gets a run asking for 7 days refused at admission, holding nothing."""
    ns = "misuse-timeout"
    _namespace(ns)
    policy = {**LAB_POLICY, "spec": {**LAB_POLICY["spec"], "namespaces": [
        *LAB_POLICY["spec"]["namespaces"], {"namespace": ns, "maxTimeoutSeconds": 600}]}}
    apply(yaml.safe_dump(policy))
    time.sleep(2)               # the operator's view of the LabPolicy (as test_policy waits)
    try:
        name = unique("week")
        apply(run_yaml(name, ns=ns, plan="misuse-quick", timeoutSeconds=7 * 86400))
        st = finished(custom, name, ns=ns, timeout=60)
        attempt("a run asking for timeoutSeconds 7 days (cap 600)",
                f"{st['phase']}/{cond(st).get('reason')}", leaked=st.get("board") is not None)
        assert st["phase"] == "Failed" and cond(st)["reason"] == "PolicyViolation", st
        assert "maxTimeoutSeconds" in cond(st)["message"] and not st.get("board"), st
    finally:
        apply_lab_policy()


MARKER_PLAN = """
apiVersion: benchfarm.io/v1alpha1
kind: TestPlan
metadata: {name: misuse-marker}
spec:
  suites:
    - {name: say, suite: shell, command: 'echo "Kernel panic - not syncing: said, not done"',
       timeoutSeconds: 30}
"""


def test_a_suite_that_only_prints_a_panic_marker_charges_no_board(custom, attempt):
    """A suite on the board's own image prints the device type's panic marker and goes on: the
    board is health-checked (its own image boots), the step done once more, and the run fails
    as its own doing on its first board. A breach: a board charged or the run moved."""
    apply(MARKER_PLAN)
    name = unique("marker")
    before = boards(custom)
    apply(run_yaml(name, plan="misuse-marker", selector={"deviceType": "qemu-x86"},
                   bootCycles=1, iterations=1))
    st = finished(custom, name, timeout=600)
    after = boards(custom)
    c = cond(st)
    attempt("a suite that only prints a panic marker",
            f"{st['phase']}/{c.get('reason')} after {st.get('attempts')} attempt(s)",
            charged=charged(before, after))
    assert st["phase"] == "Failed" and c["reason"] == "RunCrashedBoard", st
    assert st.get("attempts") == 1 and not st.get("avoidBoards"), st
    assert charged(before, after) == 0, (before, after)


def test_a_lease_s_ssh_certificate_reaches_only_its_own_place(custom, attempt, tmp_path):
    """A person in `benchfarm lease --shell` forwards, with the lease's own SSH certificate, to
    another board's console and power through the exporter hosts' sshd, then, the lease
    released, to their own board's again. A breach: any of them opened."""
    from benchfarm_devlab.sshauth import forwards
    from tests.stack.leaseshell import LeaseShell, http_get, resources_of
    own, other = forwards(resources_of("vb-x86-0")), forwards(resources_of("vb-x86-1"))
    person = LeaseShell(tmp_path / "eve", "default", "vb-x86-0", name=unique("ssh"))
    try:
        opened = [f"{h}:{p}" for h, p in other if p not in own and person.forward(h, p, http_get())[0]]
    finally:
        person.finish()
    attempt("ssh -W with a lease's cert to another board's console/power",
            f"refused by the sshd: {', '.join(opened) or 'none of'} {len(other)} opened",
            leaked=bool(opened))
    after = [f"{h}:{p}" for h, p in own if person.forward(h, p)[0]]
    attempt("a released lease's SSH cert, to its own board again",
            f"Permission denied: {', '.join(after) or 'none'} opened", leaked=bool(after))
    assert not opened and not after, (opened, after)


def test_a_lease_s_power_forward_drives_its_own_board_only(custom, attempt, tmp_path):
    """A person in `benchfarm lease --shell` asks their own board's power switch, through the
    forward their lease's certificate allows, for another board's outlet and rails and for the
    lab's test hooks (a fault, isolation off, line noise on the console: each harmless if it
    went through). A breach: any of them answered; their own outlet answers (the probe works)."""
    from tests.stack.leaseshell import LeaseShell, resources_of
    board = "vb-x86-0"
    switch = resources_of(board)["NetworkPowerPort"]
    url = urllib.parse.urlsplit(switch["host"])
    own, other = int(switch["index"]), int(resources_of("vb-x86-1")["NetworkPowerPort"]["index"])
    asks = [f"/outlet/{other}/", f"/rails/{other}", f"/fault/{other}/none",
            f"/network/{own}/isolated", f"/chaos/{own}/garbage"]
    person = LeaseShell(tmp_path / "mallory", "default", board, name=unique("pwr"))
    try:
        def status_line(path: str) -> str:
            _, said = person.forward(url.hostname, url.port,
                                     f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
            return said.split("\r\n", 1)[0]
        mine = status_line(f"/outlet/{own}/")
        answered = [path for path in asks if " 404 " not in status_line(path)]
    finally:
        person.finish()
    attempt("through its own board's power forward, another board's outlet or the lab's hooks",
            f"{len(asks) - len(answered)} of {len(asks)} answered 404; own outlet: {mine[9:15]}",
            leaked=bool(answered))
    assert " 200 " in mine, mine
    assert answered == [], answered


UNREACHABLE_PLAN = """
apiVersion: benchfarm.io/v1alpha1
kind: TestPlan
metadata: {name: misuse-unreachable-envelope}
spec:
  envelope: {minFrequencyMHz: 100000, retakes: 1}     # 100 GHz: no board runs at it
  suites:
    - {name: hello, suite: shell, command: 'echo bf-hello', timeoutSeconds: 30}
"""


@pytest.mark.full    # 95 s (three attempts, each waiting out the device type's 30 s): make misuse
def test_a_plan_whose_envelope_no_board_meets_ends_its_run_and_charges_no_board(custom, attempt):
    """Issue 56: a plan tightens the device type's envelope beyond what any board can do (a
    tenant's mistake, or a way to hold a board measuring forever). Each iteration is measured,
    judged invalid, retaken a bounded number of times (the stricter retakes of device type and
    plan), and the run ends OutsideEnvelope, saying why; the board is charged nothing and is
    free again. A breach: a board charged, or a run that does not end."""
    apply(UNREACHABLE_PLAN)
    name = unique("unreachable")
    before = boards(custom)
    apply(run_yaml(name, plan="misuse-unreachable-envelope", bootCycles=1, iterations=1,
                   timeoutSeconds=900))
    st = finished(custom, name, timeout=900)
    c = cond(st)
    board = st.get("board")
    if board:
        wait_for(f"{board} idle again", lambda: boards(custom)[board].get("state") == "Idle",
                 timeout=120)
    after = boards(custom)
    attempt("a plan envelope no board can meet",
            f"{st['phase']}/{c.get('reason')} after {st.get('attempts')} attempt(s)",
            charged=charged(before, after))
    assert st["phase"] == "Failed" and c["reason"] == "OutsideEnvelope", st
    assert "hello: " in c["message"] and "below the envelope's 100000 MHz" in c["message"], c
    assert "neither the build nor the board is charged" in c["message"], c
    assert st.get("attempts") == 1 and charged(before, after) == 0, st
