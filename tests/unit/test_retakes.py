"""Retakes (session.steps): a suite step measured outside its envelope is marked invalid with
its reasons, kept in the checkpoint's `retaken` with its own raw output, and measured again up
to the envelope's retakes; the last attempt is the step's record; a warm-up, a failed suite and
a device type without a conditions source are never retaken. The board is a fake: it hands out
the conditions a real probe would have read."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from benchfarm.api.conditions import CpuPolicy, Envelope, Snapshot, StepConditions
from benchfarm.api.devicetype import ConditionsSource, DeviceType
from benchfarm.api.outcomes import Measurement
from benchfarm.api.runs import BenchmarkRunSpec, SuiteSpec
from benchfarm.core import steps as st
from benchfarm.core.statistics.results import SuiteRecord
from benchfarm.session.results import record_from_dict
from benchfarm.session.steps import StepRunner
from benchfarm.suites.base import Metric


def at(khz: int, throttled: int = 0) -> Snapshot:
    return Snapshot(t=1.0, cpufreq={"policy0": CpuPolicy(curKHz=khz, governor="performance")},
                    throttle={"cooling_device0": throttled})


class Board:
    """Hands out one attempt's conditions per call, in order: 'ok', 'slow' or 'failed'."""

    def __init__(self, attempts: list[str]) -> None:
        self.attempts = attempts
        self.calls: list[dict] = []
        self.cancelled = threading.Event()

    def suite(self, spec, iteration, warmup, parse=None, envelope=None, retake=0):
        self.calls.append({"envelope": envelope, "retake": retake})
        kind = self.attempts[len(self.calls) - 1]
        counted = 3 if kind == "slow" else 0
        cond = StepConditions(before=at(1_000_000), after=at(1_000_000, counted), retake=retake,
                              during=[at(1_000_000) if kind != "slow" else at(500_000, 3)])
        record = SuiteRecord(step=spec.name, suite=spec.suite, iteration=iteration,
                             warmup=warmup, exit_code=0 if kind != "failed" else 1, seconds=1.0,
                             metrics=[Metric("score", 10.0 if kind != "slow" else 5.0)],
                             error="exit code 1" if kind == "failed" else None,
                             conditions=cond.model_dump(mode="json"))
        return record, f"{kind} output {len(self.calls)}", {}


def runner(attempts: list[str], *, retakes: int = 2, source: bool = True,
           suite_envelope: Envelope | None = None):
    suite = SuiteSpec(name="cpu", suite="shell", command="x", envelope=suite_envelope)
    put: dict[str, bytes] = {}
    events: list[tuple] = []
    ctx = SimpleNamespace(
        prefix="ns/r/u", suites=[suite], iterations=lambda: 3,
        spec=BenchmarkRunSpec(selector={"deviceType": "vt"}, suites=[suite], iterations=3),
        spool=SimpleNamespace(put=lambda key, data, ctype: put.update({key: data})
                              or f"s3://b/{key}"),
        status=SimpleNamespace(progress=lambda *a, **k: None,
                               event=lambda *a: events.append(a)))
    r = StepRunner.__new__(StepRunner)
    r.ctx, r.session = ctx, Board(attempts)
    r.dtype = DeviceType(name="vt", labgrid="vt.labgrid.yaml", boot={},
                         conditions=ConditionsSource(simulated=True) if source else None,
                         envelope=Envelope(minFrequencyMHz=900, allowThrottling=False,
                                           retakes=retakes))
    r.steps_done, r.steps_total, r.parse = 0, 3, None
    r.max_metrics, r.metrics_used = 100, None
    r.checkpoints = lambda: []
    return r, put, events


def test_an_invalid_iteration_is_retaken_and_the_valid_retake_is_its_record():
    r, put, events = runner(["slow", "ok"])
    got = r.run_step(st.Step(st.SUITE, "it-002-cpu", iteration=2))
    assert [c["retake"] for c in r.session.calls] == [0, 1]
    (first,) = got["retaken"]
    assert first["conditions"]["valid"] is False and first["conditions"]["retake"] == 0
    assert first["conditions"]["invalid"] == [
        "policy0 at 500 MHz, below the envelope's 900 MHz (during, 1 of 1 samples)",
        "throttled: cooling_device0 counted 3 events during the step"]
    assert first["artifact"] == "s3://b/ns/r/u/raw/cpu/iteration-002.txt"
    assert put["ns/r/u/raw/cpu/iteration-002.txt"] == b"slow output 1"
    record = record_from_dict(got["record"])
    assert record.valid and record.conditions["retake"] == 1
    assert record.artifact == "s3://b/ns/r/u/raw/cpu/iteration-002-retake-1.txt"
    (event,) = events
    assert event[:2] == ("Warning", Measurement.retaken) and "retake 1 of 2" in event[2]
    assert "500 MHz" in event[2]
    assert r.metrics_used == 1                 # the retaken attempts' metrics are not counted


def test_retakes_are_bounded_and_the_last_invalid_attempt_is_the_record():
    r, _, events = runner(["slow", "slow", "slow", "ok"], retakes=2)
    got = r.run_step(st.Step(st.SUITE, "it-001-cpu", iteration=1))
    assert len(r.session.calls) == 3 and len(got["retaken"]) == 2 and len(events) == 2
    record = record_from_dict(got["record"])
    assert not record.valid and record.conditions["retake"] == 2


def test_no_retake_for_a_warmup_a_failed_suite_or_a_board_that_shows_nothing():
    r, _, _ = runner(["slow", "ok"])
    got = r.run_step(st.Step(st.SUITE, "it-001-cpu", iteration=1, warmup=True))
    assert got["retaken"] == [] and got["record"]["conditions"]["valid"] is False
    r, _, _ = runner(["failed", "ok"])
    assert r.run_step(st.Step(st.SUITE, "it-001-cpu", iteration=1))["retaken"] == []
    r, _, _ = runner(["slow", "ok"], source=False)
    got = r.run_step(st.Step(st.SUITE, "it-001-cpu", iteration=1))
    assert got["retaken"] == [] and got["record"]["conditions"]["valid"] is True


def test_the_step_is_judged_against_the_device_types_envelope_tightened_by_the_suites():
    r, _, _ = runner(["ok"] * 3, suite_envelope=Envelope(minFrequencyMHz=1200, retakes=0))
    got = r.run_step(st.Step(st.SUITE, "it-001-cpu", iteration=1))
    envelope = r.session.calls[0]["envelope"]
    assert (envelope.minFrequencyMHz, envelope.retakes, envelope.allowThrottling) == \
        (1200, 2, False)
    assert len(got["retaken"]) == 2       # 1000 MHz is below the suite's 1200: retaken, twice
