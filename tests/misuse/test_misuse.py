"""Issue 22 on the real stack: what a tenant can try against a shared lab, and what it gets.

Each test is one attempt (or one kind of attempt over every board type): a real BenchmarkRun on
the embedded lab, and checks of what a lab engineer cares about — nothing of another namespace
leaked or reached, no finished step redone and no evidence lost, no healthy board charged or
quarantined. `make misuse` prints the table (tests/misuse/conftest.py); any breach fails.
"""

from __future__ import annotations

import os
import time

import pytest
import yaml

import benchfarm_devlab as devlab
from benchfarm_devlab.lab import apply_lab_policy
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
DEVICE_TYPES = ["qemu-x86", "qemu-arm64-a53", "qemu-x86-gpu", "qemu-x86-bench",
                "qemu-x86-sigrok"]


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
    return ArtifactStore(StoreConfig.from_env())


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
    names = {dt: unique(f"panic-{dt.split('-', 1)[-1]}") for dt in DEVICE_TYPES}
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
    """One namespace floods the queue with 1,000 runs under `maxBoards: 1`: it never holds more
    than one board, another namespace's run still starts and finishes, and the operator's
    memory stays bounded."""
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
        for i in range(1000):
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
        attempt("1,000 runs from one namespace, maxBoards: 1",
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
