"""Issue 43 on the real stack: `benchfarm submit` as a CI job runs it, and the exit code it acts
on: a good run of the demo plan (0, JUnit with every step), a kernel that does not boot (3, the
run's fault, not the board's), a build slower than its baseline (1, naming the metric), Ctrl-C
(130, the run cancelled); and `benchfarm export kcidb` of the good run validating with
kcidb-io."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import kcidb_io
import pytest
from junitparser import Failure, JUnitXml

import benchfarm_devlab as devlab
from tests.stack.conftest import apply, wait_for
from tests.stack.runs import GROUP, VERSION, cond, finished

pytestmark = pytest.mark.stack

BENCHFARM = Path(devlab.VENV_BIN) / "benchfarm"


def no_store_keys() -> dict[str, str]:
    """The lab's environment without the store's keys: `submit`, `upload` and `export` reach the
    store with the namespace's own credential (its Secret benchfarm-store), never the lab's."""
    return {k: v for k, v in {**os.environ, **devlab.lab_env()}.items()
            if not k.startswith("BENCHFARM_S3_")}
PLANS = """
apiVersion: benchfarm.io/v1alpha1
kind: TestPlan
metadata: {name: stacktest-submit-kernel}
spec:
  suites:
    - {name: release, suite: shell, command: uname -r, timeoutSeconds: 30}
---
apiVersion: benchfarm.io/v1alpha1
kind: TestPlan
metadata: {name: stacktest-submit-fast}
spec:
  suites:
    - {name: probe, suite: sysbench, command: "echo 'events per second: 1000.00'", timeoutSeconds: 30}
---
apiVersion: benchfarm.io/v1alpha1
kind: TestPlan
metadata: {name: stacktest-submit-slow}
spec:
  description: the same probe, as a build that lost half its throughput would measure it
  suites:
    - {name: probe, suite: sysbench, command: "echo 'events per second: 500.00'", timeoutSeconds: 30}
"""


@pytest.fixture(scope="module")
def custom(kube, operator):
    from kubernetes import client
    for doc in PLANS.split("---"):
        apply(doc)
    devlab.apply_lab_policy()   # namespace default may boot software from its own folder
    return client.CustomObjectsApi(kube)


def submit(tmp_path: Path, tag: str, *args: str, timeout: float = 900):
    out = {k: tmp_path / f"{tag}.{k}" for k in ("xml", "json", "kcidb")}
    res = subprocess.run([str(BENCHFARM), "submit", *args, "--junit", str(out["xml"]),
                          "--json", str(out["json"]), "--kcidb", str(out["kcidb"]),
                          "--poll", "1"],
                         env=no_store_keys(), capture_output=True, text=True, timeout=timeout)
    summary = json.loads(out["json"].read_text()) if out["json"].exists() else {}
    return res, summary, out


def test_a_good_run_exits_0_with_a_junit_case_for_every_step_and_exports_to_kcidb(
        custom, tmp_path):
    res, summary, out = submit(tmp_path, "good", "--plan", "demo", "--device-type", "qemu-x86",
                               "--iterations", "1")
    assert res.returncode == 0, res.stderr
    assert "created" in res.stderr and "Succeeded" in res.stderr      # progress lines
    assert "# Benchmark report" in res.stdout
    assert summary["exitCode"] == 0 and summary["blame"] is None
    suites = list(JUnitXml.fromfile(str(out["xml"])))
    cases = {c.name: c for c in suites[0]}
    assert {"cyclictest-idle", "hackbench"} <= set(cases), cases
    assert not any(c.result for c in cases.values())
    assert suites[0].failures == 0 and suites[0].errors == 0
    kcidb_io.schema.LATEST.validate(json.loads(out["kcidb"].read_text()))

    exported = tmp_path / "export.json"
    res = subprocess.run([str(BENCHFARM), "export", "kcidb", summary["run"], "-o",
                          str(exported)], env=no_store_keys(),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    doc = json.loads(exported.read_text())
    kcidb_io.schema.LATEST.validate(doc)
    numbers = {t["path"]: t for t in doc["tests"] if "number" in t}
    assert any(p.startswith("benchfarm.demo.hackbench.") for p in numbers), numbers
    assert all(t["environment"]["misc"]["deviceType"] == "qemu-x86" for t in numbers.values())
    assert {t["status"] for t in numbers.values()} == {"DONE"}     # nothing to compare with


def test_a_kernel_that_does_not_boot_exits_3_the_runs_fault(custom, tmp_path):
    """U-Boot loads it and refuses it ("Bad Linux ARM64 Image magic"): the run's fault, one
    attempt, the board not charged (test_software_stack's full variant applies the same run)."""
    board = custom.get_cluster_custom_object(GROUP, VERSION, "boards", "vb-a53-0")
    failures = board.get("status", {}).get("consecutiveInfraFailures", 0)
    (tmp_path / "Image").write_bytes(b"not a kernel")
    up = subprocess.run([str(BENCHFARM), "upload", str(tmp_path / "Image"), "--key",
                         "stacktest-submit/Image"], env=no_store_keys(), capture_output=True,
                        text=True, timeout=120)
    assert up.returncode == 0, up.stderr
    url, digest = up.stdout.split()
    assert url.endswith("/default/stacktest-submit/Image")
    assert digest == hashlib.sha256(b"not a kernel").hexdigest()
    res, summary, out = submit(
        tmp_path, "broken", "--plan", "stacktest-submit-kernel", "--device-type",
        "qemu-arm64-a53", "--kernel", url, "--kernel-sha256", digest, "--boot-cycles", "1")
    assert res.returncode == 3, res.stderr
    assert "SoftwareBootFailed" in res.stderr
    assert summary["blame"] == "Run" and summary["reason"] == "SoftwareBootFailed"
    ns, name = summary["run"].split("/")
    st = custom.get_namespaced_custom_object(GROUP, VERSION, ns, "benchmarkruns", name)["status"]
    assert st.get("attempts", 1) == 1, st
    board = custom.get_cluster_custom_object(GROUP, VERSION, "boards", "vb-a53-0")
    assert board.get("status", {}).get("consecutiveInfraFailures", 0) == failures, board
    suites = list(JUnitXml.fromfile(str(out["xml"])))
    run_case = next(c for c in suites[0] if c.classname == "benchfarm.run")
    assert isinstance(run_case.result[0], Failure)
    assert run_case.result[0].type == "SoftwareBootFailed"
    doc = json.loads(out["kcidb"].read_text())
    kcidb_io.schema.LATEST.validate(doc)
    assert doc["builds"][0]["output_files"][0]["url"] == url


def test_a_slower_build_exits_1_naming_the_metric(custom, tmp_path):
    res, base, _ = submit(tmp_path, "base", "--plan", "stacktest-submit-fast", "--device-type",
                          "qemu-x86", "--iterations", "5")
    assert res.returncode == 0, res.stderr
    baseline = base["run"].split("/")[1]
    res, summary, out = submit(tmp_path, "slow", "--plan", "stacktest-submit-slow",
                               "--device-type", "qemu-x86", "--iterations", "5",
                               "--baseline", baseline)
    assert res.returncode == 1, res.stderr
    assert "probe/sysbench-cpu-events" in res.stderr
    # the probe for sure; a boot phase too at times (one boot each side: the summary rule)
    assert "probe/sysbench-cpu-events (events/s)" in summary["regressed"], summary["regressed"]
    suites = list(JUnitXml.fromfile(str(out["xml"])))
    verdicts = {c.name: c for c in suites[0] if c.classname == "benchfarm.regression"}
    assert isinstance(verdicts["probe/sysbench-cpu-events (events/s)"].result[0], Failure)


def test_ctrl_c_cancels_the_run_and_exits_130(custom, tmp_path):
    proc = subprocess.Popen([str(BENCHFARM), "submit", "--plan", "demo", "--device-type",
                             "qemu-x86", "--poll", "1", "--junit", str(tmp_path / "c.xml")],
                            env={**os.environ, **devlab.lab_env()}, stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True)
    assert proc.stderr is not None
    first = proc.stderr.readline()
    assert first.strip().endswith("created"), first
    name = first.split()[2]
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    assert proc.wait(timeout=180) == 130, rest
    st = finished(custom, name.split("/")[1], timeout=60)
    assert st["phase"] == "Cancelled" and cond(st)["reason"] == "Cancelled", st
    assert (tmp_path / "c.xml").exists()
    wait_for("no run of this test left on a board", lambda: not any(
        (r.get("status") or {}).get("phase") == "Running"
        for r in custom.list_namespaced_custom_object(GROUP, VERSION, "default",
                                                      "benchmarkruns")["items"]
        if r["metadata"]["name"] == name.split("/")[1]), timeout=60)


@pytest.mark.full   # an outage outlasting a run (minutes); exit 2 from the reason: tests/unit/test_submit_ci.py
def test_the_store_stopped_past_the_runs_timeout_exits_2_the_labs_fault(custom, tmp_path):
    """MinIO stopped as the run starts on its board, and started again only after `submit` has ended:
    the session waits the outage out until the run's timeout, and the run fails as the lab's
    fault (OutageOutlastedRun, or a hand-back out of retries: either is the lab's)."""
    out = tmp_path / "outage.json"
    proc = subprocess.Popen([str(BENCHFARM), "submit", "--plan", "stacktest-submit-fast",
                             "--device-type", "qemu-x86", "--iterations", "3", "--timeout",
                             "100", "--poll", "1", "--json", str(out)],
                            env={**os.environ, **devlab.lab_env()}, stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True)
    assert proc.stderr is not None
    lines = []
    try:
        for line in proc.stderr:
            lines.append(line)
            if "Running on" in line:      # progress lines are rate-limited: the first one
                break
        devlab.stop_process("minio")
        lines.append(proc.stderr.read())
        code = proc.wait(timeout=900)
    finally:
        devlab.up()
    said = "".join(lines)
    assert code == 2, said
    summary = json.loads(out.read_text())
    assert summary["blame"] == "Lab", summary
