"""`benchfarm submit`'s pure parts: whose fault a failure is (typed, api.outcomes), the exit code
(core.statistics.gate), and the JUnit, JSON and KCIDB documents of a run (report.ci) read back by a JUnit
reader and validated with kcidb-io; `export kcidb --submit` against a receiver on loopback."""

from __future__ import annotations

import ast
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import kcidb_io
import pytest
from junitparser import Error, Failure, JUnitXml

from benchfarm.api.outcomes import RUN_FAULTS, Blame, Reason, Refusal, RunFailure, blame
from benchfarm.core.statistics.gate import Exit, decide
from benchfarm.report.ci import junit, kcidb, outcome, summary
from benchfarm.settings import Settings

OPERATOR = Path(__file__).resolve().parents[2] / "operator" / "benchfarm"
RUN_ERRORS = {"RunError"}
INFRA_ERRORS = {"InfraError", "BoardFault", "Outage", "DeployedBootFailed"}


def _raised_reasons() -> dict[str, set[str]]:
    """Every reason a RunError or an infrastructure error is raised with in the package, by
    class: members of api.outcomes' enums (and constants, which test_no_literal_reasons
    refuses)."""
    from benchfarm.api import outcomes
    found: dict[str, set[str]] = {"run": set(), "infra": set()}
    for path in OPERATOR.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            cls = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) \
                else ""
            kind = "run" if cls in RUN_ERRORS else "infra" if cls in INFRA_ERRORS else None
            for kw in node.keywords:
                if kind is None or kw.arg != "reason":
                    continue
                v = kw.value
                if isinstance(v, ast.Constant):
                    found[kind].add(v.value)
                elif isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and \
                        hasattr(outcomes, v.value.id):
                    found[kind].add(str(getattr(getattr(outcomes, v.value.id), v.attr)))
    return found


def test_every_reason_a_run_error_is_raised_with_is_typed_and_blamed_on_the_run_or_the_lab():
    found = _raised_reasons()
    assert found["run"] and found["infra"]
    typed = {*Reason, *Refusal, *RunFailure}
    assert found["run"] <= typed, found["run"] - typed
    lab_run_errors = {RunFailure.outage_outlasted_run, RunFailure.signing_key_missing}
    assert {r for r in found["run"] if blame(r) == Blame.lab} == lab_run_errors
    assert not {r for r in found["infra"] if blame(r) == Blame.run}


def test_blame_of_the_reasons_the_operator_and_a_session_finish_with():
    assert blame(Reason.software_boot_failed) == blame(Reason.suites_failed) == Blame.run
    assert blame(Refusal.artifactUnavailable) == blame(RunFailure.plan_not_found) == Blame.run
    assert blame(Reason.too_many_resumes) == blame(Reason.board_taken) == Blame.lab
    assert blame(RunFailure.queue_timeout) == blame("SerialSilent") == Blame.lab
    assert all(isinstance(r, str) for r in RUN_FAULTS)


def _status(phase, reason, message="", regressed=None):
    conds = [{"type": "Succeeded", "status": "True" if phase == "Succeeded" else "False",
              "reason": reason, "message": message}]
    if regressed:
        conds.append({"type": "Regressed", "status": regressed[0], "reason": regressed[1],
                      "message": regressed[2]})
    return {"phase": phase, "conditions": conds, "board": "vb-x86-0",
            "completionTime": "2026-11-28T08:00:00Z"}


ROWS = [{"key": "probe/sysbench-cpu-events (events/s)", "verdict": "regressed", "change": -0.5,
         "baseline": "1000", "current": "500", "evidence": "Mann-Whitney p=0.008"},
        {"key": "boot/kernel-to-prompt (s)", "verdict": "unchanged", "change": 0.01,
         "baseline": "21", "current": "21.2", "evidence": "p=0.6"}]


@pytest.mark.parametrize("status, rows, baseline, interrupted, code", [
    (_status("Succeeded", "Completed"), [], None, False, Exit.ok),
    (_status("Succeeded", "Completed"), ROWS[1:], "base", False, Exit.ok),
    (_status("Succeeded", "Completed"), ROWS, "base", False, Exit.regressed),
    (_status("Succeeded", "Completed", regressed=("Unknown", "BaselineUnavailable", "gone")), [],
     "base", False, Exit.run),
    (_status("Failed", "SuitesFailed"), [], None, False, Exit.run),
    (_status("Failed", "SoftwareBootFailed"), [], None, False, Exit.run),
    (_status("Failed", "PlanNotFound"), [], None, False, Exit.run),
    (_status("Failed", "DigestMismatch"), [], None, False, Exit.run),
    (_status("Failed", "OutageOutlastedRun"), [], None, False, Exit.lab),
    (_status("Failed", "SerialSilent", "board fault on vb-x86-0"), [], None, False, Exit.lab),
    (_status("Failed", "QueueTimeout"), [], None, False, Exit.lab),
    (_status("Cancelled", "Cancelled"), [], None, True, Exit.interrupted),
    (_status("Cancelled", "Cancelled"), [], None, False, Exit.lab),
])
def test_the_exit_code(status, rows, baseline, interrupted, code):
    d = decide(status, rows, baseline=baseline, interrupted=interrupted)
    assert d.code == code, d
    if code == Exit.regressed:
        assert d.regressed == ("probe/sysbench-cpu-events (events/s)",)
        assert "probe/sysbench-cpu-events" in d.why


def _body(status, spec=None):
    return {"metadata": {"namespace": "ci", "name": "run-1", "uid": "u-1"},
            "spec": {"selector": {"deviceType": "qemu-x86"}, "plan": "demo", **(spec or {})},
            "status": {**status, "resolvedSuites": [
                {"name": "probe", "suite": "sysbench", "command": "x"},
                {"name": "hackbench", "suite": "hackbench", "command": "y"}]}}


DOC = {
    "run": {"deviceType": "qemu-x86", "board": "vb-x86-0"},
    "series": [{"step": "probe", "name": "sysbench-cpu-events", "unit": "events/s",
                "higherIsBetter": True, "values": [500.0, 500.0, 499.0], "display": "500"},
               {"step": "hackbench", "name": "hackbench-time", "unit": "s",
                "higherIsBetter": False, "values": [1.5, 1.7], "display": "1.6"}],
    "records": [{"step": "probe", "iteration": i, "warmup": False, "seconds": 1.0,
                 "error": None} for i in (1, 2, 3)]
    + [{"step": "hackbench", "iteration": 3, "warmup": False, "seconds": 2.0,
        "error": "exit code 1"}],
    "boots": [{"kernel-to-prompt": 21.0}, {"kernel-to-prompt": 21.4}],
    "bootSummary": {"kernel-to-prompt": {"display": "21.2"}},
    "provenance": {"compatible": ["linux,dummy-virt"]},
    "comparison": {"baseline": "base", "rows": ROWS},
}
SOFTWARE = {"software": {"name": "next", "kernel": {
    "url": "s3://benchfarm-artifacts/ci/123/bzImage", "sha256": "a" * 64}}}


def _outcomes():
    good = _body(_status("Succeeded", "Completed"), {**SOFTWARE, "baseline": "base"})
    regressed = outcome(good, DOC, decide(good["status"], ROWS, baseline="base"))
    broken = _body(_status("Failed", "SoftwareBootFailed", "no Starting kernel"), SOFTWARE)
    lab = _body(_status("Failed", "SerialSilent", "board fault on vb-x86-0"))
    return [regressed,
            outcome(broken, None, decide(broken["status"])),
            outcome(lab, None, decide(lab["status"]))]


def test_junit_reads_back_with_a_case_per_step_boot_phase_and_verdict(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_bytes(junit(_outcomes()))
    xml = JUnitXml.fromfile(str(path))
    suites = list(xml)
    assert [s.name for s in suites] == ["ci/run-1"] * 3
    cases = {(c.classname, c.name): c for c in suites[0]}
    assert set(cases) == {("benchfarm.demo", "probe"), ("benchfarm.demo", "hackbench"),
                          ("benchfarm.demo.boot", "boot/kernel-to-prompt"),
                          ("benchfarm.regression", "probe/sysbench-cpu-events (events/s)"),
                          ("benchfarm.regression", "boot/kernel-to-prompt (s)")}
    assert not cases[("benchfarm.demo", "probe")].result
    assert isinstance(cases[("benchfarm.demo", "hackbench")].result[0], Failure)
    assert isinstance(cases[("benchfarm.regression", "probe/sysbench-cpu-events (events/s)")]
                      .result[0], Failure)
    assert not cases[("benchfarm.regression", "boot/kernel-to-prompt (s)")].result
    assert suites[0].failures == 2 and suites[0].tests == 5
    broken = {c.name: c for c in suites[1]}
    assert isinstance(broken["ci/run-1"].result[0], Failure)       # the run's fault
    assert "SoftwareBootFailed" in broken["ci/run-1"].result[0].type
    lab = {c.name: c for c in suites[2]}
    assert isinstance(lab["ci/run-1"].result[0], Error)            # the lab's
    text = path.read_text()
    assert 'name="sysbench-cpu-events.mean" value="499.667"' in text
    assert 'name="software.kernel.sha256" value="' + "a" * 64 in text


def test_kcidb_validates_and_carries_numbers_environment_software_and_verdicts():
    doc = kcidb(_outcomes())
    kcidb_io.schema.LATEST.validate(doc)
    assert len(doc["checkouts"]) == 2 and len(doc["builds"]) == 2   # software, board's image
    build = doc["builds"][0]
    assert build["output_files"] == [{"name": "software-kernel",
                                      "url": "s3://benchfarm-artifacts/ci/123/bzImage"}]
    assert build["misc"]["software"]["software"]["kernel"]["sha256"] == "a" * 64
    tests = {t["path"]: t for t in doc["tests"]}
    probe = tests["benchfarm.demo.probe.sysbench-cpu-events"]
    assert probe["number"] == {"value": pytest.approx(499.667, abs=1e-3), "unit": "events/s"}
    assert probe["status"] == "FAIL" and probe["environment"]["compatible"] == ["linux,dummy-virt"]
    assert tests["benchfarm.demo.boot.kernel-to-prompt"]["status"] == "PASS"
    assert tests["benchfarm.demo.hackbench"]["status"] == "FAIL"    # a failed iteration
    runs = [t for t in doc["tests"] if t["id"].endswith(":run")]
    assert [t["status"] for t in runs] == ["FAIL", "MISS"]          # the run's, the lab's


def test_json_names_the_metrics_and_the_verdicts():
    s = summary(_outcomes()[0])
    assert s["exitCode"] == 1 and s["regressed"] == ["probe/sysbench-cpu-events (events/s)"]
    assert {m["key"] for m in s["metrics"]} == {"probe/sysbench-cpu-events (events/s)",
                                               "hackbench/hackbench-time (s)"}
    assert s["verdicts"][0]["verdict"] == "regressed"
    json.dumps(s)


def test_flags_make_the_spec_and_the_plans_history_names_a_baseline():
    import argparse

    from benchfarm.cli.submit import _spec, add_parsers, latest_of_plan
    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["submit", "--plan", "demo", "--device-type", "qemu-x86",
                              "--kernel", "s3://b/k", "--kernel-sha256", "b" * 64,
                              "--initrd", "s3://b/i", "--sha256sums", "s3://b/SHA256SUMS",
                              "--iterations", "3", "--boot-args", "quiet"])
    spec = _spec(args, {"selector": {"board": "vb-x86-0"}, "suites": [{"name": "x"}]})
    assert spec["selector"] == {"deviceType": "qemu-x86"} and spec["plan"] == "demo"
    assert "suites" not in spec and spec["iterations"] == 3
    assert spec["software"] == {"kernel": {"url": "s3://b/k", "sha256": "b" * 64},
                                "initrd": {"url": "s3://b/i", "sha256Url": "s3://b/SHA256SUMS"},
                                "bootArgs": "quiet"}

    def run(name, plan, when, phase="Succeeded"):
        return {"metadata": {"name": name}, "spec": {"plan": plan, "selector": {
            "deviceType": "qemu-x86"}}, "status": {"phase": phase, "completionTime": when}}
    runs = [run("old", "demo", "2026-01-01T00:00:00Z"), run("new", "demo", "2026-02-01T00:00:00Z"),
            run("failed", "demo", "2026-03-01T00:00:00Z", "Failed"),
            run("other", "rt", "2026-04-01T00:00:00Z")]
    assert latest_of_plan(runs, spec) == "new"
    assert latest_of_plan(runs, {**spec, "plan": "nope"}) is None


def test_export_posts_the_document_to_a_receiver_on_loopback():
    from benchfarm.cli.export import post
    got: list[tuple[str, dict]] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((self.headers.get("Authorization"), json.loads(body)))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        doc = kcidb(_outcomes())
        code = post(f"http://127.0.0.1:{server.server_port}/submit", doc, "t0ken")
    finally:
        server.shutdown()
        server.server_close()
    assert code == 200
    assert got[0][0] == "Bearer t0ken"
    kcidb_io.schema.LATEST.validate(got[0][1])
    assert got[0][1] == doc


def test_a_campaigns_kcidb_document_has_each_finished_run_and_validates(monkeypatch):
    from benchfarm.cli import export, outcome
    good = _body(_status("Succeeded", "Completed"), SOFTWARE)
    broken = {**_body(_status("Failed", "SoftwareBootFailed", "no Starting kernel"), SOFTWARE),
              "metadata": {"namespace": "ci", "name": "run-2", "uid": "u-2"}}
    runs = {"run-1": good, "run-2": broken}

    class FakeKube:
        def get_run(self, ns, name):
            return runs.get(name)

        def get_custom(self, plural, ns, name):
            assert plural == "benchmarkcampaigns"
            return {"status": {"columns": [   # as the operator writes them (`ColumnStatus`)
                {"name": "a", "phase": "Succeeded", "run": "run-1"},
                {"name": "b", "phase": "Missing", "run": "run-2"},
                {"name": "c", "phase": "Waiting"}]}}
    monkeypatch.setattr(export, "lab_api", lambda settings: FakeKube())
    monkeypatch.setattr(outcome, "results", lambda body, settings: (
        (DOC, "# report") if body["metadata"]["name"] == "run-1" else (None, None)))
    outcomes = export.export_outcomes(Settings(), "ci/release-1")
    assert [(o.name, o.decision.code) for o in outcomes] == [("run-1", Exit.regressed),
                                                            ("run-2", Exit.run)]
    doc = kcidb(outcomes)
    kcidb_io.schema.LATEST.validate(doc)
    assert len(doc["builds"]) == 1          # the same software: one checkout, one build
    assert {t["id"].split(":")[1] for t in doc["tests"]} == {"u-1", "u-2"}
