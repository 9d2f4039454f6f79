"""Issue 13 on the real stack: the other output shapes of the same tools, produced on a virtual
board and read by the parsers (cyclictest --json, openssl -multi and -mr, iperf3 UDP, stress-ng
bogo-ops; 7-Zip's `7z b` is left out: it fails with E_NOTIMPL under QEMU TCG), and a run on a
virtual board compared with a vendor guide lines up every family it measured."""

from __future__ import annotations

import json

import pytest

from benchfarm.settings import Settings
from tests.stack.conftest import apply
from tests.stack.runs import cond, finished, run_yaml, unique
from tests.stack.test_operator import custom  # noqa: F401
from tests.stack.test_suites_stack import _artifact

pytestmark = pytest.mark.stack


def test_other_output_shapes_parse_on_a_virtual_board(custom):  # noqa: F811
    from benchfarm_devlab import REPO
    apply((REPO / "testplans" / "output-shapes.yaml").read_text())
    name = unique("shapes")
    apply(run_yaml(name, plan="output-shapes", timeoutSeconds=900))
    st = finished(custom, name, timeout=600)
    assert cond(st)["status"] == "True", st["results"]
    doc = json.loads(_artifact(custom, name, "metrics.json"))
    got = {(s["step"], s["name"]): s for s in doc["series"]}
    assert ("cyclictest-json", "cyclictest-t0-max") in got
    assert got[("cyclictest-json", "cyclictest-max")]["values"][0] > 0
    assert got[("openssl-multi", "openssl-aes-128-gcm-16B")]["values"][0] > 0
    assert got[("openssl-multi-mr", "openssl-rsa2048-sign")]["values"][0] > 0
    assert ("iperf3-udp", "iperf3-udp-jitter") in got and ("iperf3-udp", "iperf3-udp-lost") in got
    assert got[("stress-ng-bogo", "stress-ng-cpu-bogo-ops")]["values"][0] > 0


def test_a_virtual_board_run_compared_with_a_guide_lines_up_every_family(custom):  # noqa: F811
    from benchfarm.cli.readback import compare
    from benchfarm_devlab import REPO
    apply((REPO / "testplans" / "guide-families.yaml").read_text())
    name = unique("families")
    apply(run_yaml(name, plan="guide-families", bootCycles=1, timeoutSeconds=600))
    st = finished(custom, name, timeout=400)
    assert cond(st)["status"] == "True", st["results"]
    guide = REPO / "tests" / "data" / "guides" / "ti_am64x_rt_linux_performance_guide.rst"
    table, _ = compare(Settings.from_env(), f"default/{name}", str(guide))
    rows = [line.split("|")[1].strip() for line in table.splitlines()
            if line.startswith("| ") and not line.startswith("| Metric")]
    families = {"cyclictest": "cyclictest-t0-", "openssl": "openssl-aes-128-cbc-",
                "dd": "dd-emmc-ext4-102400-write-throughput", "boot": "kernel-to-prompt"}
    missing = {f for f, prefix in families.items() if not any(r.startswith(prefix) for r in rows)}
    assert not missing, table
