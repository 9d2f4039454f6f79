"""Statuses are read through their models (`api.status.Status.of`) as leniently as the dict reads
they replace, a record parses its status once per change, and the CRDs' status schemas are the
models' described fields."""

from __future__ import annotations

import logging

from benchfarm.api.campaigns import BenchmarkCampaignStatus
from benchfarm.api.crdgen import all_crds
from benchfarm.api.leases import BoardLeaseStatus
from benchfarm.api.notifications import NotificationStatus
from benchfarm.api.runs import BenchmarkRunSpec, BenchmarkRunStatus
from benchfarm.core.conditions import get_condition, set_condition
from benchfarm.operator.state.records import RunState


def test_a_missing_or_partial_status_reads_as_the_defaults():
    assert BenchmarkRunStatus.of(None).phase is None
    assert BenchmarkRunStatus.of({}).conditions == []
    st = BoardLeaseStatus.of({"phase": "Granted"})
    assert st.phase == "Granted" and st.place is None and st.leaseEnd is None
    assert NotificationStatus.of({"delivered": 3}).pending == 0


def test_unknown_fields_are_kept_and_a_field_that_is_not_what_benchfarm_writes_is_dropped(caplog):
    with caplog.at_level(logging.WARNING, logger="benchfarm"):
        st = BenchmarkRunStatus.of({"phase": "Running", "board": "b1", "resumes": "many",
                                    "goAhead": {"attempt": "x"}, "fromNewerVersion": 1})
    assert (st.phase, st.board, st.resumes, st.goAhead) == ("Running", "b1", None, None)
    assert st.model_extra == {"fromNewerVersion": 1}
    assert "goAhead, resumes" in caplog.text


def test_conditions_read_typed_are_written_back_with_what_another_writer_added():
    st = BenchmarkCampaignStatus.of({"conditions": [
        {"type": "Regressed", "status": "False", "reason": "NoRegression", "by": "someone"}]})
    out = set_condition(st.conditions, "Succeeded", "Unknown", "ColumnsRunning", "1 of 2")
    assert get_condition(out, "Regressed") == {
        "type": "Regressed", "status": "False", "reason": "NoRegression", "message": "",
        "by": "someone"}
    assert get_condition(out, "Succeeded")["reason"] == "ColumnsRunning"


def test_a_record_parses_its_status_once_per_change():
    spec = BenchmarkRunSpec.model_validate({"selector": {"deviceType": "qemu-x86"},
                                            "plan": "p"})
    run = RunState("team", "r", "uid-r", 1, 0.0, spec, {"phase": "Pending"})
    first = run.typed
    assert run.typed is first and run.phase == "Pending" and not run.released
    run.status = {**run.status, "phase": "Running", "board": "b1", "boardReleased": True}
    assert run.typed is not first
    assert (run.phase, run.board, run.released) == ("Running", "b1", True)


def test_the_status_schemas_are_the_models_described_fields():
    crds = all_crds()

    def status(plural: str) -> dict:
        return crds[plural]["spec"]["versions"][0]["schema"]["openAPIV3Schema"][
            "properties"]["status"]

    for plural, model in (("benchmarkruns", BenchmarkRunStatus),
                          ("boardleases", BoardLeaseStatus),
                          ("benchmarkcampaigns", BenchmarkCampaignStatus),
                          ("notifications", NotificationStatus)):
        described = {n for n, f in model.model_fields.items() if f.description}
        schema = status(plural)
        assert set(schema["properties"]) == described | {"conditions"}, plural
        assert schema["x-kubernetes-preserve-unknown-fields"] is True
        assert all("default" not in p for p in schema["properties"].values())
    assert status("benchmarkcampaigns")["properties"]["running"]["type"] == "integer"
    assert status("boardleases")["properties"]["expiresAt"]["format"] == "date-time"
