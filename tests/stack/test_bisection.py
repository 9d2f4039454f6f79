"""Issue 57 on the real stack: a BenchmarkBisection on the arm64 board with the deterministic
clock (vb-icount-0), its builds Debian's cloud kernel booted through U-Boot, the slower ones
with `slub_debug=P` (hackbench 15-20 % slower). make test: the example's kind, three builds after
the good one, the operator killed once a step has finished; the full variant (make bisection):
16 candidates and the bad build with the slowdown from the 11th, the same with an unbootable
build on the search's path, and with no slowdown at all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import benchfarm_devlab as devlab
from tests.stack.conftest import apply, wait_for
from tests.stack.runs import GROUP, VERSION, unique

pytestmark = pytest.mark.stack

EXAMPLE = Path(__file__).resolve().parents[2] / "testplans" / "examples" / "bisection.yaml"
SLOWER, UNBOOTABLE = "slub_debug=P", "rdinit=/nonexistent root=/dev/nonexistent"


@pytest.fixture(scope="module")
def custom(kube, operator):
    from kubernetes import client
    plan, _ = yaml.safe_load_all(EXAMPLE.read_text())
    apply(yaml.safe_dump(plan))
    devlab.apply_lab_policy()   # namespace default may boot the kernels published under builds/
    return client.CustomObjectsApi(kube)


def bisection(name: str, count: int, slower_from: int | None, unbootable: int | None = None) -> dict:
    """The example's bisection with `count` builds after the good one (1-based `slower_from`,
    `unbootable`), each a boot argument of its own."""
    _, body = yaml.safe_load_all(EXAMPLE.read_text())
    kernel = body["spec"]["good"]["kernel"]
    builds = []
    for i in range(1, count + 1):
        args = [f"benchfarm.build=b{i}"]
        args += [SLOWER] if slower_from is not None and i >= slower_from else []
        args += [UNBOOTABLE] if i == unbootable else []
        builds.append({"name": f"b{i}", "kernel": kernel, "bootArgs": " ".join(args)})
    body["metadata"]["name"] = name
    body["spec"]["builds"] = builds
    return body


def get(custom, name):
    return custom.get_namespaced_custom_object(GROUP, VERSION, "default", "benchmarkbisections", name)


def answered(custom, name, timeout):
    return wait_for(f"bisection {name} answered", lambda: (
        b if (b := get(custom, name)).get("status", {}).get("phase") in (
            "Succeeded", "Failed", "Cancelled") else None), timeout=timeout, every=2)


def runs_of(custom, name):
    return custom.list_namespaced_custom_object(GROUP, VERSION, "default", "benchmarkruns",
                                                label_selector=f"benchfarm.io/bisection={name}")["items"]


def record(name: str) -> str:
    done = subprocess.run([sys.executable, "-m", "benchfarm", "bisect", "log", f"default/{name}"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_bisection_names_the_first_slower_build_and_survives_an_operator_kill(custom):
    name = unique("bisect")
    apply(yaml.safe_dump(bisection(name, 3, slower_from=2)))
    # the first step (b2, the middle) finished: kill -9 the operator, start it again
    wait_for("the first step's verdict", lambda: any(
        s.get("verdict") for s in get(custom, name).get("status", {}).get("steps", [])),
        timeout=900, every=2)
    os.kill(devlab.running_pid("benchfarm-operator"), signal.SIGKILL)
    devlab.start_operator()
    body = answered(custom, name, timeout=900)
    st = body["status"]
    assert st["phase"] == "Succeeded", st
    condition = next(c for c in st["conditions"] if c["type"] == "Succeeded")
    assert condition["reason"] == "CulpritFound", condition
    assert st["answer"]["firstBad"] == "b2" and st["answer"]["lastGood"] == "b1", st["answer"]
    assert 0.05 <= st["answer"]["effect"] <= 0.5, st["answer"]   # hackbench: 15-20 % slower
    steps = [(s["name"], s["verdict"]) for s in st["steps"]]
    assert steps == [("b2", "bad"), ("b1", "good")], steps
    assert len(steps) <= st["maxSteps"] == 2 and st["pairs"] >= 6 and st["boardSeconds"] > 0
    # the kill redid no step: one run for each batch of pairs, all on the first run's board
    runs = runs_of(custom, name)
    assert sorted(r["metadata"]["name"] for r in runs) == sorted(
        run for s in st["steps"] for run in s["runs"]), (runs, st["steps"])
    assert {r["status"]["board"] for r in runs} == {st["board"]} == {"vb-icount-0"}
    assert all(r["spec"]["software"]["name"] == "cloud" for r in runs)
    log = record(name)
    assert log.startswith("git bisect start\n# bad: [b3]") and "git bisect bad b2\n" in log
    assert log.rstrip().endswith("# first bad commit: [b2] s3://benchfarm-artifacts/builds/"
                                 "qemu-arm64/debian-cloud-arm64/vmlinuz benchfarm.build=b2 "
                                 "slub_debug=P")


@pytest.mark.full
@pytest.mark.parametrize("case", ["slower from the 11th", "the 9th unbootable", "no slowdown"])
def test_sixteen_candidates_and_the_bad_build(custom, case):
    """The issue's bisections: 17 builds after the good one (16 candidates, the bad one last);
    the 9th is the search's first step (the middle), so an unbootable 9th is met and skipped."""
    name = unique("bisect16")
    slower = None if case == "no slowdown" else 11
    apply(yaml.safe_dump(bisection(name, 17, slower, unbootable=9 if "9th" in case else None)))
    st = answered(custom, name, timeout=3600)["status"]
    assert st["phase"] == "Succeeded", st
    print(f"\n{case}: {len(st['steps'])} steps, {st['pairs']} pairs, {st['boardSeconds']:.0f} s "
          f"of board time: {[(s['name'], s['verdict'], s.get('pairs')) for s in st['steps']]}")
    if slower is None:
        assert st["answer"]["kind"] == "NoChange" and "firstBad" not in st["answer"]
        return
    assert st["answer"]["firstBad"] == "b11" and st["answer"]["kind"] == "Culprit", st["answer"]
    skipped = [s["name"] for s in st["steps"] if s["verdict"] == "skip"]
    assert skipped == (["b9"] if "9th" in case else [])
    assert len(st["steps"]) <= 5 + len(skipped) and len(st["steps"]) <= st["maxSteps"]


def test_a_namespace_that_may_not_boot_its_own_software_gets_no_step_run(custom):
    """Team B (no allowSoftware in the LabPolicy) bisects team A's builds: the first step's run
    is refused its software like any run of team B's, and the bisection fails on it."""
    ns = "bisect-team-b"
    devlab.kubectl("create", "namespace", ns, check=False, capture=True)
    body = bisection("other-team", 3, slower_from=2)
    body["metadata"]["namespace"] = ns
    apply(yaml.safe_dump(body))
    try:
        st = wait_for("team B's bisection failed", lambda: (
            s if (s := custom.get_namespaced_custom_object(
                GROUP, VERSION, ns, "benchmarkbisections", "other-team").get("status", {})
            ).get("phase") == "Failed" else None), timeout=120, every=1)
        condition = next(c for c in st["conditions"] if c["type"] == "Succeeded")
        assert condition["reason"] == "RunFailed" and "SoftwareNotAllowed" in condition["message"]
        runs = custom.list_namespaced_custom_object(GROUP, VERSION, ns, "benchmarkruns")["items"]
        assert [r.get("status", {}).get("board") for r in runs] == [None]   # it never got a board
    finally:
        devlab.kubectl("delete", "namespace", ns, "--wait=false", check=False, capture=True)
