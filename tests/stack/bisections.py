"""BenchmarkBisections on the real stack: the example's bisection of Debian's cloud kernel on
vb-icount-0 with as many builds as a test needs, and reading one back. Shared by the bisection
tests (tests/stack/test_bisection.py) and the chaos suite's kills mid-bisection."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

import benchfarm_devlab as devlab
from tests.stack.conftest import apply, wait_for
from tests.stack.runs import GROUP, VERSION

EXAMPLE = Path(__file__).resolve().parents[2] / "testplans" / "examples" / "bisection.yaml"
SLOWER, UNBOOTABLE = "slub_debug=P", "rdinit=/nonexistent root=/dev/nonexistent"


def install() -> None:
    """The example's TestPlan, and the lab's policy (namespace default may boot the kernels
    published under builds/)."""
    plan, _ = yaml.safe_load_all(EXAMPLE.read_text())
    apply(yaml.safe_dump(plan))
    devlab.apply_lab_policy()


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
    done = subprocess.run([str(devlab.VENV_BIN / "benchfarm"), "bisect", "log", f"default/{name}"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout
