"""Issue 4 on the real stack: the virtual-smoke plan, reports with (min, max), baselines, arm64."""

from __future__ import annotations

import pytest

from benchfarm.settings import Settings
from tests.stack.conftest import apply
from tests.stack.test_operator import cond, custom, finished, get, run_yaml, unique  # noqa: F401

pytestmark = pytest.mark.stack


def _store():
    from benchfarm.store.artifacts import ArtifactStore, StoreConfig
    return ArtifactStore(StoreConfig.from_settings(Settings.from_env()))


def _artifact(custom, name, file):
    uid = get(custom, name)["metadata"]["uid"]
    return _store().get(f"default/{name}/{uid}/{file}").decode()


def test_virtual_smoke_two_iterations_reports_min_and_max(custom):
    # two iterations make a min and a max; test_campaigns runs the plan on x86 and arm64 too
    name = unique("smoke")
    apply(run_yaml(name, plan="virtual-smoke", iterations=2, timeoutSeconds=1800))
    st = finished(custom, name, timeout=900)
    assert cond(st)["status"] == "True", st["results"]
    suites = st["results"]["suites"]
    assert set(suites) == {"cyclictest-idle", "cyclictest-load", "hackbench", "openssl-aes",
                           "sysbench-cpu", "mbw", "stress-ng-cpu", "fio-randread", "dd-write",
                           "iperf3-tcp"}
    assert all(s["runs"] == 2 and s["failed"] == 0 for s in suites.values())
    assert "(min" in suites["cyclictest-load"]["value"]
    report = _artifact(custom, name, "report.md")
    assert report.count("(min") >= 10
    assert "## iperf3-tcp: iperf3" in report and "CPU Load % (LOCAL_CPU_UTIL) |" in report
    assert "## fio-randread: fio randread" in report and "| 4k |  |  | " in report
    html = _artifact(custom, name, "report.html")
    assert "Boot timeline" in html and "<svg" in html      # the timeline, drawn as inline SVG
    rst = _artifact(custom, name, "report.rst")
    assert '.. csv-table::' in rst and ': perf"' in rst


def test_a_run_with_a_baseline_gets_a_regressed_condition_and_a_comparison(custom):
    base, new = unique("base"), unique("cmp")
    apply(run_yaml(base, plan="demo", iterations=3, selector={"board": "vb-x86-1"}))
    assert cond(finished(custom, base))["status"] == "True"
    apply(run_yaml(new, plan="demo", iterations=3, selector={"board": "vb-x86-1"}, baseline=base))
    st = finished(custom, new)
    regressed = cond(st, "Regressed")
    assert regressed["status"] in ("True", "False")
    assert regressed["reason"] in ("MetricsRegressed", "NoRegression")
    assert base in regressed["message"]
    report = _artifact(custom, new, "report.md")
    assert f"## Comparison with run {base}" in report and "Mann-Whitney" in report
    # the CLI reads both back from any cluster: only KUBECONFIG and BENCHFARM_S3_* are given
    shown = _cli("report", f"default/{new}")
    assert shown.returncode == 0, shown.stderr
    assert "(min" in shown.stdout and "hackbench" in shown.stdout
    compared = _cli("compare", f"default/{new}", f"default/{base}")
    assert compared.returncode in (0, 3), compared.stderr
    assert "Mann-Whitney" in compared.stdout and "hackbench" in compared.stdout
    missing = _cli("report", "default/no-such-run")
    assert missing.returncode == 1 and "run default/no-such-run not found" in missing.stderr
    assert "Traceback" not in missing.stderr


def _cli(*args: str):
    import os
    import subprocess
    import sys
    keep = ("KUBECONFIG", "BENCHFARM_S3_ENDPOINT", "BENCHFARM_S3_ACCESS_KEY",
            "BENCHFARM_S3_SECRET_KEY", "BENCHFARM_S3_BUCKET", "BENCHFARM_S3_SECURE")
    env = {"PATH": os.environ["PATH"], "HOME": "/tmp", **{k: os.environ[k] for k in keep}}
    exe = os.path.join(os.path.dirname(sys.executable), "benchfarm")
    return subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.full   # make test: the arm64 board's kernels (test_software_stack), its panic (misuse)
def test_the_arm64_board_runs_through_the_operator(custom):
    name = unique("arm")
    apply(run_yaml(name, plan="demo", selector={"deviceType": "qemu-arm64-a53"}, bootCycles=2))
    st = finished(custom, name, timeout=300)
    assert cond(st)["status"] == "True", st
    assert st["board"] == "vb-a53-0" and "aarch64" in st["provenance"]["uname"]
    assert st["results"]["boot"]["n"] == 2


def test_a_plan_whose_programs_the_board_lacks_is_refused_at_admission(custom):
    name = unique("noprog")
    apply(run_yaml(name, plan="ti-linux-perf-guide"))
    st = finished(custom, name, timeout=30)
    assert cond(st)["reason"] == "MissingPrograms"
    assert "bw_mem" in cond(st)["message"] and "qemu-x86" in cond(st)["message"]
