"""Issue 5 on the real stack: glmark2 on the virtual GPU board, rails in low-power modes."""

from __future__ import annotations

import json

import pytest
import yaml

import benchfarm_devlab as devlab
from benchfarm.settings import Settings
from tests.stack.conftest import apply
from tests.stack.test_operator import cond, custom, finished, get, unique  # noqa: F401

pytestmark = pytest.mark.stack
EXAMPLES = devlab.REPO / "testplans" / "examples"


def _example(file: str, name: str, **spec_changes) -> tuple[str, str]:
    plan, run = list(yaml.safe_load_all((EXAMPLES / file).read_text()))
    run["metadata"]["name"] = name
    run["spec"].update(spec_changes)
    return yaml.safe_dump(plan), yaml.safe_dump(run)


def _metrics(custom, name):
    from benchfarm.store.artifacts import ArtifactStore, StoreConfig
    uid = get(custom, name)["metadata"]["uid"]
    store = ArtifactStore(StoreConfig.from_settings(Settings.from_env()))
    return json.loads(store.get(f"default/{name}/{uid}/metrics.json"))


def test_glmark2_renders_on_the_virtual_gpu_board(custom):
    name = unique("gpu")
    for doc in _example("gpu.yaml", name, iterations=1):
        apply(doc)
    st = finished(custom, name, timeout=600)
    assert cond(st)["status"] == "True", st
    assert st["board"] == "vb-gpu-0"
    series = {s["name"]: s["values"] for s in _metrics(custom, name)["series"]}
    scenes = {k: v for k, v in series.items() if k.startswith("glmark2-") and k != "glmark2-score"}
    assert {"glmark2-build", "glmark2-texture", "glmark2-shading-phong", "glmark2-bump"} <= set(scenes)
    assert all(v[0] > 0 for v in scenes.values())
    assert "glmark2-score" in series  # llvmpipe under load may round the score to 0


def test_a_gpu_suite_on_boards_without_a_gpu_is_rejected(custom):
    name = unique("nogpu")
    plan, run = _example("gpu.yaml", name, selector={"deviceType": "qemu-x86"})
    apply(plan)
    apply(run)
    st = finished(custom, name, timeout=30)
    assert cond(st)["reason"] == "NoGPU" and "no matching board has a GPU" in cond(st)["message"]


def test_low_power_run_reports_every_rail_and_proves_the_board_slept(custom):
    name = unique("lp")
    for doc in _example("low-power.yaml", name):
        apply(doc)
    st = finished(custom, name, timeout=600)
    assert cond(st)["status"] == "True", st
    doc = _metrics(custom, name)
    values = {(s["step"], s["name"]): sum(s["values"]) / len(s["values"]) for s in doc["series"]}
    rails = [r["name"] for r in yaml.safe_load(
        (devlab.DEVICE_TYPES / "qemu-x86.yaml").read_text())["rails"]]
    for rail in rails:
        assert ("deep-sleep", f"rail-{rail}-deep-sleep") in values
        assert ("deep-sleep", f"rail-{rail}-active") in values
    asleep = values[("deep-sleep", "rail-total-deep-sleep")]
    active = values[("deep-sleep", "rail-total-active")]
    assert asleep < active / 10, (asleep, active)
    evidence = doc["evidence"]["deep-sleep/1"]
    assert evidence["kernelEnter"] and evidence["kernelExit"]
    assert "suspended" in evidence["statesSeen"]
    assert evidence["qmpEvents"][:2] == ["SUSPEND", "WAKEUP"]
    uid = get(custom, name)["metadata"]["uid"]
    from benchfarm.store.artifacts import ArtifactStore, StoreConfig
    store = ArtifactStore(StoreConfig.from_settings(Settings.from_env()))
    serial = store.get(f"default/{name}/{uid}/serial.log").decode(errors="replace")
    assert "PM: suspend entry (deep)" in serial and "PM: suspend exit" in serial
    report = store.get(f"default/{name}/{uid}/report.rst").decode()
    assert ".. csv-table:: deep-sleep Power Performance" in report


def _fault(board: str, mode: str) -> None:
    cfg = json.loads((devlab.STATE / "vlab" / "vlab.json").read_text())
    index = next(b["index"] for b in cfg["boards"] if b["name"] == board)
    devlab.vlab_request(f"/fault/{index}/{mode}")


@pytest.mark.full   # make test: a board that wakes (above); a board that hangs (chaos)
def test_a_board_that_fails_to_wake_is_power_cycled_and_reported(custom):
    apply(yaml.safe_dump({"apiVersion": "benchfarm.io/v1alpha1", "kind": "TestPlan",
                          "metadata": {"name": "stacktest-sleep"}, "spec": {"suites": [{
                              "name": "deep-sleep", "suite": "low-power", "parameters": {
                                  "mode": "deep-sleep", "sleepSeconds": "4", "settleSeconds": "1",
                                  "windowSeconds": "2", "activeSeconds": "1",
                                  "wakeTimeoutSeconds": "8"}}]}}))
    name = unique("nowake")
    _fault("vb-x86-1", "no-wake")
    try:
        apply(yaml.safe_dump({"apiVersion": "benchfarm.io/v1alpha1", "kind": "BenchmarkRun",
                              "metadata": {"name": name, "namespace": "default"},
                              "spec": {"selector": {"board": "vb-x86-1"}, "plan": "stacktest-sleep"}}))
        st = finished(custom, name, timeout=300)
    finally:
        _fault("vb-x86-1", "none")
    assert st["phase"] == "Failed" and cond(st)["reason"] == "WakeFailed", st
    assert "did not wake" in cond(st)["message"] and "board fault on vb-x86-1" in cond(st)["message"]
    cfg = json.loads((devlab.STATE / "vlab" / "vlab.json").read_text())
    index = next(b["index"] for b in cfg["boards"] if b["name"] == "vb-x86-1")
    assert devlab.vlab_request(f"/outlet/{index}/") == "0"  # the session powered it off
    board = custom.get_cluster_custom_object("benchfarm.io", "v1alpha1", "boards", "vb-x86-1")
    assert "WakeFailed" in (board["status"].get("reason") or "")
