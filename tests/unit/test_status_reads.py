"""Statuses are read through their models (`api.base.Status.of`) as leniently as the dict reads
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
    run = RunState("team", "r", "uid-r", 1, 0.0, spec, {"phase": "Pending", "resolvedSuites": [
        {"name": "a", "suite": "glmark2", "command": "glmark2"}], "avoidBoards": ["b0"]})
    first = run.head
    assert run.head is first and run.phase == "Pending" and not run.released
    assert (first.suites, first.gpu, first.avoidBoards) == (1, True, ("b0",))
    run.status = {**run.status, "phase": "Running", "board": "b1", "boardReleased": True}
    assert run.head is not first
    assert (run.phase, run.board, run.released) == ("Running", "b1", True)


def test_a_record_keeps_its_head_not_its_status_model():
    """What a queued run's record holds besides its status: its head (165 B here), not the
    status's whole model (4.4 KB a run, 44 MB of 10,000 queued runs)."""
    import tracemalloc
    spec = BenchmarkRunSpec.model_validate({"selector": {"deviceType": "qemu-x86"},
                                            "plan": "p"})
    status = {"phase": "Pending", "queuePosition": 12, "planDigest": "sha256:" + "a" * 64,
              "resolvedSuites": [{"name": "work", "suite": "shell", "command": "sleep 3",
                                  "timeoutSeconds": 60, "parameters": {}, "requires": []}],
              "conditions": [{"type": t, "status": "Unknown", "reason": "Queued",
                              "message": "waiting for a matching board",
                              "lastTransitionTime": "2026-12-02T10:00:00Z"}
                             for t in ("Admitted", "Scheduled")]}
    runs = [RunState("team", f"r{i}", f"uid-{i}", 1, 0.0, spec, dict(status))
            for i in range(200)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        heads = [r.head for r in runs]
        kept = (tracemalloc.get_traced_memory()[0] - before) / len(runs)
        models = [BenchmarkRunStatus.of(r.status) for r in runs]
        whole = (tracemalloc.get_traced_memory()[0] - before) / len(runs) - kept
    finally:
        tracemalloc.stop()
    assert len(heads) == len(models) and kept < whole / 4, (kept, whole)


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
