"""Generated CRDs match the models, plans validate, and the layers keep to themselves."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from benchfarm.api.crdgen import render
from benchfarm.api.labpolicy import LabPolicySpec
from benchfarm.api.runs import BenchmarkRunSpec, TestPlanSpec
from tests.conftest import REPO


def test_committed_crds_match_the_models():
    for name, text in render().items():
        committed = (REPO / "crds" / name).read_text()
        assert committed == text, f"crds/{name} drifted from the models: run `make crds`"


def test_generated_chart_files_are_in_sync():
    import importlib.util
    spec = importlib.util.spec_from_file_location("sync_generated", REPO / "hack" / "sync_generated.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.stale() == [], "generated files drifted: run `make crds`"


def test_every_testplan_validates():
    plans = sorted((REPO / "testplans").glob("*.yaml"))
    assert plans
    for path in plans:
        doc = yaml.safe_load(path.read_text())
        assert doc["kind"] == "TestPlan"
        TestPlanSpec(**doc["spec"])


def test_run_spec_bounds():
    BenchmarkRunSpec(selector={"deviceType": "qemu-x86"}, plan="demo")
    with pytest.raises(ValidationError):
        BenchmarkRunSpec(selector={"deviceType": "qemu-x86"}, plan="demo", iterations=0)
    with pytest.raises(ValidationError):
        BenchmarkRunSpec(selector={"deviceType": "qemu-x86"}, plan="demo", surprise=1)


def test_a_namespace_gets_its_first_policy_entry_or_the_default():
    spec = {"namespaces": [{"namespace": "a", "maxBoards": 1}, {"namespace": "b", "maxBoards": 2},
                           {"namespace": "a", "maxBoards": 3}],
            "default": {"namespace": "default-policy", "maxBoards": 9}}
    policy = LabPolicySpec(**spec)
    assert [policy.for_namespace(ns).maxBoards for ns in ("a", "b", "c")] == [1, 2, 9]
    assert LabPolicySpec().for_namespace("a").maxBoards == 1000
    assert policy == LabPolicySpec(**spec) and policy.model_dump() == LabPolicySpec(**spec).model_dump()


def test_import_contracts_hold():
    lint = Path(sys.executable).parent / "lint-imports"
    res = subprocess.run([str(lint), "--config", str(REPO / "pyproject.toml")], cwd=REPO,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 broken" in res.stdout


def test_every_module_says_why_it_exists():
    missing = []
    paths = [*(REPO / "operator" / "benchfarm").rglob("*.py"),
             *(REPO / "devlab" / "benchfarm_devlab").rglob("*.py")]
    for path in paths:
        text = path.read_text().lstrip()
        if not text.startswith('"""'):
            missing.append(str(path.relative_to(REPO)))
    assert not missing, f"modules without a docstring: {missing}"


def test_the_cli_without_the_dev_lab_says_where_it_lives(monkeypatch, capsys):
    from benchfarm.cli import entry as cli
    monkeypatch.setattr(cli, "_plugins", lambda sub: None)   # as in the operator image
    assert cli.main(["lab", "up"]) == 2
    assert "pip install -e devlab/" in capsys.readouterr().err
