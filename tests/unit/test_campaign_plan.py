"""What a campaign does next (core.guides.campaign), case by case: a run per column, one retry on
another board, missing columns with their reason, cancelling, runs of an older namesake ignored."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from benchfarm.api.campaigns import BenchmarkCampaignSpec, ColumnPhase
from benchfarm.core.guides.campaign import plan, run_name

CAMPAIGN = {"metadata": {"name": "sdk-11-01", "namespace": "lab", "uid": "u-1"}}
SPEC = {"release": "11.01", "plan": "guide", "iterations": 5, "bootCycles": 20,
        "columns": [{"name": "qemu-x86", "selector": {"deviceType": "qemu-x86"}},
                    {"name": "qemu-arm64-a53", "selector": {"deviceType": "qemu-arm64-a53"},
                     "software": {"name": "next", "kernel": {"url": "s3://builds/k", "sha256Url": "s3://builds/SHA256SUMS"}}}]}


def spec(**over) -> BenchmarkCampaignSpec:
    return BenchmarkCampaignSpec(**{**SPEC, **over})


def run(column: str, attempt: int, phase: str | None = None, board: str = "", reason: str = "",
        uid: str = "u-1", cancel: bool = False) -> dict:
    status: dict = {"phase": phase, "board": board} if phase else {}
    if reason:
        status["conditions"] = [{"type": "Succeeded", "status": "False", "reason": reason,
                                 "message": f"{reason} on {board}"}]
    return {"metadata": {"name": run_name("sdk-11-01", column, attempt), "labels": {
        "benchfarm.io/campaign-uid": uid, "benchfarm.io/column": column,
        "benchfarm.io/column-attempt": str(attempt)}}, "spec": {"cancel": cancel},
        "status": status}


def test_a_new_campaign_makes_one_owned_labelled_run_per_column():
    p = plan(CAMPAIGN, spec(), [])
    assert [r["metadata"]["name"] for r in p.create] == ["sdk-11-01-qemu-x86-1",
                                                         "sdk-11-01-qemu-arm64-a53-1"]
    first, second = p.create
    assert first["metadata"]["labels"] == {
        "benchfarm.io/campaign": "sdk-11-01", "benchfarm.io/campaign-uid": "u-1",
        "benchfarm.io/column": "qemu-x86", "benchfarm.io/column-attempt": "1",
        "benchfarm.io/release": "11.01"}
    assert first["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert first["spec"] == {"selector": {"deviceType": "qemu-x86"}, "plan": "guide",
                             "bootCycles": 20, "priority": 100, "timeoutSeconds": 3600,
                             "warmupIterations": 0, "iterations": 5}
    assert second["spec"]["software"]["kernel"]["url"] == "s3://builds/k"
    assert [c.phase for c in p.columns] == [ColumnPhase.waiting] * 2 and not p.finished


def test_a_failed_column_is_retried_once_avoiding_its_board_then_missing_with_its_reason():
    runs = [run("qemu-x86", 1, "Succeeded", "vb-x86-0"),
            run("qemu-arm64-a53", 1, "Failed", "vb-a53-0", "SoftwareBootFailed")]
    p = plan(CAMPAIGN, spec(), runs)
    assert [r["metadata"]["name"] for r in p.create] == ["sdk-11-01-qemu-arm64-a53-2"]
    assert p.create[0]["metadata"]["annotations"] == {"benchfarm.io/avoid-boards": "vb-a53-0"}
    assert p.columns[1].phase == ColumnPhase.retrying and p.columns[1].attempts == 2
    runs.append(run("qemu-arm64-a53", 2, "Failed", "vb-a53-1", "SoftwareBootFailed"))
    p = plan(CAMPAIGN, spec(), runs)
    assert p.create == [] and p.finished
    assert p.columns[0].phase == ColumnPhase.succeeded and p.columns[0].board == "vb-x86-0"
    missing = p.columns[1]
    assert (missing.phase, missing.reason, missing.message, missing.attempts) == (
        ColumnPhase.missing, "SoftwareBootFailed", "SoftwareBootFailed on vb-a53-1", 2)


def test_cancelling_cancels_what_runs_and_makes_nothing_new():
    runs = [run("qemu-x86", 1, "Running", "vb-x86-0")]
    p = plan(CAMPAIGN, spec(cancel=True), runs)
    assert p.create == [] and p.cancel == ["sdk-11-01-qemu-x86-1"]
    assert p.columns[1].phase == ColumnPhase.missing and p.columns[1].reason == "Cancelled"
    runs = [run("qemu-x86", 1, "Cancelled", "vb-x86-0", "Cancelled", cancel=True)]
    p = plan(CAMPAIGN, spec(cancel=True), runs)
    assert p.cancel == [] and p.create == [] and p.finished


def test_a_cancelled_run_is_not_retried_and_an_older_namesakes_runs_are_not_its():
    runs = [run("qemu-x86", 1, "Cancelled", "vb-x86-0", "Cancelled"),
            run("qemu-arm64-a53", 1, "Succeeded", "vb-a53-0", uid="older")]
    p = plan(CAMPAIGN, spec(), runs)
    assert p.columns[0].phase == ColumnPhase.missing
    assert [r["metadata"]["name"] for r in p.create] == ["sdk-11-01-qemu-arm64-a53-1"]


def test_long_names_stay_within_kubernetes_limits_and_apart():
    a = run_name("c" * 60, "am62xx_lp_sk-fs", 1)
    b = run_name("c" * 60, "am62xx_sk-fs", 1)
    assert len(a) <= 63 and len(b) <= 63 and a != b and a.endswith("-1")
    assert run_name("sdk", "am62xx_sk-fs", 2) == "sdk-am62xx-sk-fs-2"


def test_the_schema_refuses_duplicate_columns_and_board_names_a_guide_cannot_read():
    with pytest.raises(ValidationError):
        spec(columns=[{"name": "board", "selector": {"deviceType": "x"}}])   # no digit, _ or -
    assert spec(repeat={"relativeCI95": 0.05}).repeat is not None


def test_with_no_other_board_of_its_kind_the_retry_may_have_the_same_board():
    runs = [run("qemu-x86", 1, "Succeeded", "vb-x86-0"),
            run("qemu-arm64-a53", 1, "Failed", "vb-a53-0", "SoftwareBootFailed")]
    asked = []
    p = plan(CAMPAIGN, spec(), runs, lambda column, boards: asked.append(
        (column.name, list(boards))) or False)
    assert asked == [("qemu-arm64-a53", ["vb-a53-0"])]
    assert "annotations" not in p.create[0]["metadata"]


def test_a_run_whose_suites_failed_on_a_healthy_board_has_the_columns_results():
    runs = [run("qemu-x86", 1, "Failed", "vb-x86-0", "SuitesFailed"),
            run("qemu-arm64-a53", 1, "Succeeded", "vb-a53-0")]
    p = plan(CAMPAIGN, spec(), runs)
    assert p.create == [] and p.finished
    assert (p.columns[0].phase, p.columns[0].reason) == (ColumnPhase.succeeded, "SuitesFailed")
