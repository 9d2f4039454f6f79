"""The chart's alerting rules (helm/benchfarm/files/alerts.yaml) with the real promtool: they load
(`check rules`), each alert fires and stays quiet where tests/alerts/ says (`test rules`), they
read only metrics the operator serves (and those pass `check metrics`), and the chart's values
default to what the file says.

promtool comes from Debian's `prometheus` package, which `make test` and `make unit` install
(`make promtool-deps`): without it this fails, it does not skip."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest

from benchfarm.operator.state import metrics
from tests.conftest import REPO

RULES = REPO / "helm" / "benchfarm" / "files" / "alerts.yaml"
TESTS = sorted((REPO / "tests" / "alerts").glob("*.test.yaml"))
VALUES = REPO / "helm" / "benchfarm" / "values.yaml"


def promtool(*args: str, stdin: bytes | None = None, cwd: Path = REPO) -> str:
    exe = shutil.which("promtool")
    if exe is None:
        pytest.fail("promtool is not installed: `make promtool-deps` installs Debian's "
                    "prometheus package, which ships it (make test and make unit do)")
    res = subprocess.run([exe, *args], input=stdin, cwd=cwd, capture_output=True, timeout=120)
    out = (res.stdout + res.stderr).decode()
    assert res.returncode == 0, f"promtool {' '.join(args)}:\n{out}"
    return out


def rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def test_the_rules_file_loads_in_prometheus() -> None:
    out = promtool("check", "rules", str(RULES))
    assert f"SUCCESS: {len(rules())} rules found" in out


def test_every_alert_fires_and_stays_quiet_as_its_tests_say() -> None:
    assert TESTS
    for path in TESTS:     # rule_files are relative to the test file
        assert "SUCCESS" in promtool("test", "rules", path.name, cwd=path.parent)
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in TESTS:
        doc = yaml.safe_load(path.read_text())
        assert doc["rule_files"] == ["../../helm/benchfarm/files/alerts.yaml"], path
        for case in (t for test in doc["tests"] for t in test.get("alert_rule_test", [])):
            (firing if case["exp_alerts"] else quiet).add(case["alertname"])
    names = {r["alert"] for r in rules()}
    assert names - firing == set(), "alerts no test sees fire"
    assert names - quiet == set(), "alerts no test sees stay quiet"


def test_the_rules_read_only_metrics_the_operator_serves() -> None:
    served = {s.name for family in metrics.REGISTRY.collect() for s in family.samples} | \
        {family.name for family in metrics.REGISTRY.collect()}
    read = {name for r in rules() for name in re.findall(r"\bbenchfarm_[a-z0-9_]+", r["expr"])}
    assert read >= {"benchfarm_boards", "benchfarm_leader", "benchfarm_reachable",
                    "benchfarm_queue_oldest_wait_seconds", "benchfarm_infra_failures_total"}
    assert read <= served, f"the rules read metrics the operator does not serve: {read - served}"
    # and they pass Prometheus' own lint, as the operator serves them
    page = generate_latest(metrics.REGISTRY).decode()
    theirs = "".join(line + "\n" for line in page.splitlines()
                     if re.split(r"[{ ]", line.removeprefix("# HELP ").removeprefix("# TYPE "),
                                 maxsplit=1)[0] in read)
    assert theirs.count("# TYPE ") == len(read)
    promtool("check", "metrics", stdin=theirs.encode())


def test_the_charts_values_default_to_the_rules_file() -> None:
    """alerts.rules.<alert> in values.yaml: every alert of the file, with its `for`, the number
    its expression ends comparing with (threshold) and its range (window) as the file has them
    (the template replaces those with the values; the chart's stack test renders it)."""
    values = yaml.safe_load(VALUES.read_text())["alerts"]["rules"]
    assert set(values) == {r["alert"] for r in rules()}
    for r in rules():
        v = values[r["alert"]]
        assert set(v) <= {"for", "threshold", "window"} and v["for"] == r["for"], r["alert"]
        if "threshold" in v:
            last = re.search(r"(>=|<=|==|!=|>|<)\s*([0-9][0-9.e+]*)\s*$", r["expr"])
            assert last and float(last[2]) == float(v["threshold"]), r["alert"]
        window = re.search(r"\[([0-9]+[smhdwy])\]", r["expr"])
        assert v.get("window") == (window and window[1]), r["alert"]


def test_the_charts_schema_admits_every_alerts_values() -> None:
    """values.schema.json lists alerts.rules.<alert> one by one (no other key passes `helm lint`
    or `helm install`): every alert of the file has its entry, with what values.yaml sets."""
    import json
    schema = json.loads((REPO / "helm" / "benchfarm" / "values.schema.json").read_text())
    entries = schema["properties"]["alerts"]["properties"]["rules"]["properties"]
    assert set(entries) == {r["alert"] for r in rules()}
    values = yaml.safe_load(VALUES.read_text())["alerts"]["rules"]
    for name, v in values.items():
        assert set(v) <= set(entries[name]["properties"]), name
