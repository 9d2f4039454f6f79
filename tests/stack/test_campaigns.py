"""Issue 25 on the real stack: one `kubectl apply` runs a plan on every virtual board type and
publishes the release's guide; the next release's campaign publishes what changed; a column that
never boots is missing in the guide with its reason; cancel and delete reach the runs.

`make test` applies the two examples with one iteration and one timed boot on two columns (x86,
and arm64 through U-Boot: the plan as written); `make campaigns` applies them as written (4
iterations, 2 boots, the GPU board's column too).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import kcidb_io
import pytest
import yaml

import benchfarm_devlab as devlab
from benchfarm.core.guides.guide import read_guide
from benchfarm.settings import Settings
from tests.stack.conftest import apply, wait_for
from tests.stack.runs import GROUP, VERSION, cond, unique

pytestmark = [pytest.mark.stack, pytest.mark.timeout(3600)]
EXAMPLES = Path(__file__).resolve().parents[2] / "testplans" / "examples"
FULL = os.environ.get("BENCHFARM_CAMPAIGN_FULL") == "1"
NS = "default"
COLUMNS = ["qemu-x86", "qemu-arm64-a53", "qemu-x86-gpu"] if FULL else ["qemu-x86", "qemu-arm64-a53"]


@pytest.fixture(scope="module")
def custom(kube, operator):
    from kubernetes import client
    devlab.apply_lab_policy()   # namespace default may boot the kernels published under builds/
    return client.CustomObjectsApi(kube)


@pytest.fixture(scope="module")
def store():
    from benchfarm.store.artifacts import ArtifactStore, StoreConfig
    return ArtifactStore(StoreConfig.from_settings(Settings.from_env()))


def example(file: str, name: str, previous: str | None = None, **spec) -> str:
    body = yaml.safe_load((EXAMPLES / file).read_text())
    body["metadata"]["name"] = name
    if previous:
        body["spec"]["previous"] = previous
    if not FULL:
        body["spec"].update(iterations=1, bootCycles=1, columns=[
            c for c in body["spec"]["columns"] if c["name"] in COLUMNS])
    body["spec"].update(spec)
    return yaml.safe_dump(body)


def campaign(custom, name):
    return custom.get_namespaced_custom_object(GROUP, VERSION, NS, "benchmarkcampaigns", name)


def runs_of(custom, name):
    uid = campaign(custom, name)["metadata"]["uid"]
    return custom.list_namespaced_custom_object(
        GROUP, VERSION, NS, "benchmarkruns", label_selector=f"benchfarm.io/campaign-uid={uid}")["items"]


def finished(custom, name, timeout):
    return wait_for(f"campaign {name} to end", lambda: (
        st if (st := campaign(custom, name).get("status", {})).get("phase")
        in ("Succeeded", "Failed", "Cancelled") else None), timeout=timeout, every=0.5)


def fetch(store, url: str) -> str:
    return store.get(url.split("/", 3)[3]).decode()


def run_metrics(store, custom, run) -> set[str]:
    meta = run["metadata"]
    doc = json.loads(store.get(f"{NS}/{meta['name']}/{meta['uid']}/metrics.json"))
    return {f"{s['name']} ({s['unit']})" for s in doc["series"]} | {
        f"{phase} (s)" for phase in doc["bootSummary"]}


def cli(*args: str):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "benchfarm.cli", *args], text=True,
                          capture_output=True, env={**os.environ, **devlab.lab_env()}, timeout=120)


def _modules(text: str) -> dict[str, str]:
    """The guide's Evaluation Modules grid table (RST): each board's name and description."""
    modules = text.split("+\n\nTable:  Evaluation Modules\n", 1)[0].rsplit("\n\n", 1)[1]
    return {ln.split("|")[1].strip(): ln.split("|")[2].strip() for ln in modules.splitlines()
            if ln.startswith("| ") and not ln.startswith("| Name ")}


def test_a_release_and_the_next_publish_their_guides_and_the_changes(custom, store):
    first, second = unique("sdk-11-01"), unique("sdk-11-02")
    apply(example("campaign.yaml", first))
    st = finished(custom, first, timeout=3000 if FULL else 1500)
    assert cond(st)["status"] == "True" and cond(st)["reason"] == "Published", st
    assert st["done"] == f"{len(COLUMNS)}/{len(COLUMNS)}" and st["failed"] == 0
    columns = {c["name"]: c for c in st["columns"]}
    assert list(columns) == COLUMNS
    runs = {r["metadata"]["labels"]["benchfarm.io/column"]: r for r in runs_of(custom, first)}
    assert {r["metadata"]["labels"]["benchfarm.io/release"] for r in runs.values()} == {"11.01"}
    assert all(r["metadata"]["ownerReferences"][0]["name"] == first for r in runs.values())

    text = fetch(store, st["guide"]["rst"])
    guide = read_guide(text)
    assert guide.problems == []
    assert guide.boards == sorted(COLUMNS)
    for column, run in runs.items():     # every metric every run measured, in its own column
        assert set(guide.baseline(column)) == run_metrics(store, custom, run), column
    for header in ('"Benchmarks",' + ",".join(f'"{c}: perf"' for c in COLUMNS),
                   '"Latencies","qemu-x86: per-core","qemu-arm64-a53: per-core"',
                   '"Algorithm","Buffer Size (in bytes)","qemu-x86: throughput (KBytes/Sec)"'):
        assert header in text, header
    # the Evaluation Modules table: each board as its run measured it, never typed (issue 56)
    rows = _modules(text)
    assert sorted(rows) == sorted(COLUMNS), rows
    for column, row in rows.items():
        assert row.startswith(f"{column} board "), rows
        assert re.search(r" running at [\d.]+(-[\d.]+)?[GM]Hz\b.*\(simulated\)", row), rows
    order = [text.index(s) for s in ("System Benchmarks\n", "Boot-time Measurement\n",
                                     "Ethernet\n", "Storage\n", "Crypto\n")]
    assert order == sorted(order)
    assert "<h1>Performance Guide 11.01</h1>" in fetch(store, st["guide"]["html"])

    apply(example("campaign-next.yaml", second, previous=first))
    st2 = finished(custom, second, timeout=3000 if FULL else 1500)
    assert cond(st2)["reason"] == "Published", st2
    runs2 = {r["metadata"]["labels"]["benchfarm.io/column"]: r for r in runs_of(custom, second)}
    kernel = runs2["qemu-arm64-a53"]["status"]["provenance"]["kernelRelease"]
    assert kernel.endswith("-cloud-arm64"), kernel          # the column whose kernel changed
    assert not runs2["qemu-x86"]["status"]["provenance"]["kernelRelease"].endswith("-cloud-arm64")
    assert cond(st2, "Regressed")["status"] in ("True", "False"), st2
    changes = fetch(store, st2["changes"]["md"])
    assert changes.startswith(f"# Changes from {first} to 11.02")
    for column, run in runs2.items():     # every metric of every column, with delta and verdict
        section = changes.split(f"## {column}\n", 1)[1].split("\n## ", 1)[0]
        both = run_metrics(store, custom, run) & run_metrics(store, custom, runs[column])
        for key in both:
            line = next(ln for ln in section.splitlines() if ln.startswith(f"| {key} |"))
            assert line.rstrip().endswith(("| regressed |", "| improved |", "| unchanged |"))
            assert "%" in line.split("|")[4], line

    # the CLI: the guide read back as any vendor's guide, and compare with campaigns on a side
    guide_file = devlab.STATE / f"{first}-guide.rst"
    guide_file.write_text(text)
    listed = cli("import-guide", str(guide_file), "--format", "json")
    assert listed.returncode == 0, listed.stderr
    assert {t["board"] for t in json.loads(listed.stdout)["tables"]} == set(runs)
    both = cli("compare", f"{NS}/{second}", f"{NS}/{first}")
    assert both.returncode in (0, 3), both.stderr              # 3: something regressed
    assert all(f"## {column}" in both.stdout for column in runs)
    assert "**The board booted other software**" in both.stdout.split("## qemu-arm64-a53")[1]
    against = cli("compare", f"{NS}/{first}", str(guide_file))   # against its own guide
    assert against.returncode in (0, 3), against.stderr
    rows = [ln for ln in against.stdout.splitlines() if ln.startswith("| ") and "%" in ln]
    assert len(rows) >= sum(len(run_metrics(store, custom, r)) for r in runs.values()) * 0.9
    # its own figures, rounded to 2 decimals (cyclictest per core: to 1 us) in the guide
    assert sum("| unchanged |" in ln for ln in rows) >= len(rows) * 0.95, against.stdout

    # the campaign's runs as one KCIDB v5 document: every column a run, every metric a number
    exported = cli("export", "kcidb", f"{NS}/{second}")
    assert exported.returncode == 0, exported.stderr
    doc = json.loads(exported.stdout)
    kcidb_io.schema.LATEST.validate(doc)
    assert {t["misc"]["run"] for t in doc["tests"]} == {
        f"{NS}/{r['metadata']['name']}" for r in runs2.values()}
    numbers = [t for t in doc["tests"] if "number" in t]
    assert {t["environment"]["misc"]["deviceType"] for t in numbers} == set(COLUMNS)
    assert len(numbers) >= sum(len(run_metrics(store, custom, r)) for r in runs2.values()) * 0.9
    missing = cli("export", "kcidb", f"{NS}/no-such-campaign")
    assert missing.returncode == 1 and "no BenchmarkRun or BenchmarkCampaign" in missing.stderr


@pytest.mark.full   # make campaigns
def test_a_column_that_never_boots_is_missing_with_its_reason_and_cancel_reaches_the_runs(
        custom, store):
    store.put("default/stacktest-builds/Image", b"not a kernel")
    digest = hashlib.sha256(b"not a kernel").hexdigest()
    name = unique("sdk-broken")
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "BenchmarkCampaign",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"release": "broken", "plan": "demo", "iterations": 1, "bootCycles": 1,
                     "timeoutSeconds": 600, "columns": [
                         {"name": "qemu-x86", "selector": {"deviceType": "qemu-x86"}},
                         {"name": "bad-kernel", "selector": {"deviceType": "qemu-arm64-a53"},
                          "software": {"kernel": {
                              "url": f"s3://{store.config.bucket}/default/stacktest-builds/Image",
                              "sha256": digest}}}]}}
    apply(yaml.safe_dump(body))
    st = finished(custom, name, timeout=900)
    assert cond(st)["reason"] == "ColumnsMissing", st
    bad = next(c for c in st["columns"] if c["name"] == "bad-kernel")
    assert (bad["phase"], bad["reason"], bad["attempts"]) == ("Missing", "SoftwareBootFailed", 2)
    text = fetch(store, st["guide"]["rst"])
    assert ".. note:: bad-kernel: missing (SoftwareBootFailed: " in text
    assert '"Benchmarks","qemu-x86: perf","bad-kernel: perf"' in text
    assert read_guide(text).baseline("qemu-x86")
    # the Evaluation Modules table: each column as its run measured it (issue 56)
    rows = _modules(text)
    assert rows["bad-kernel"].startswith("not measured (SoftwareBootFailed: "), rows
    x86 = rows["qemu-x86"]
    assert x86.startswith("qemu-x86 board "), rows
    assert re.search(r" with x86 running at [\d.]+(-[\d.]+)?[GM]Hz\b.*\(simulated\)", x86), rows

    cancelled = unique("sdk-cancel")
    apply(yaml.safe_dump({**body, "metadata": {"name": cancelled, "namespace": NS},
                          "spec": {**body["spec"], "columns": body["spec"]["columns"][:1]}}))
    wait_for("its run", lambda: runs_of(custom, cancelled), timeout=60)
    custom.patch_namespaced_custom_object(GROUP, VERSION, NS, "benchmarkcampaigns", cancelled,
                                          {"spec": {"cancel": True}})
    st = finished(custom, cancelled, timeout=300)
    assert st["phase"] == "Cancelled", st
    assert all(r["spec"].get("cancel") for r in runs_of(custom, cancelled))
    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, "benchmarkcampaigns", cancelled)
    wait_for("the garbage collector to delete its runs", lambda: not custom.list_namespaced_custom_object(
        GROUP, VERSION, NS, "benchmarkruns",
        label_selector=f"benchfarm.io/campaign={cancelled}")["items"], timeout=120)
