"""What a run's documents say it was measured under: metrics.json carries every record's
conditions and the retaken attempts (their own raw output), each step's summary over its valid
iterations (frequency, governor, temperature, busy before, energy, average power, "simulated"),
the statistics leave invalid attempts out, an A/B run says it per side, and a step that got no
valid measurement ends the run OutsideEnvelope, charged to neither the build nor the board."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings, strategies as st

from benchfarm.api.outcomes import Blame, Phase, Reason, RunFailure, blame
from benchfarm.core.statistics import conditions as cond
from benchfarm.session import results as res
from benchfarm.session.reporting import run_end
from tests.unit.conditionsdata import (
    DTYPE,
    RUN,
    SUITES,
    T0,
    THROTTLED,
    boot_checkpoint,
    conditions,
    record,
    suite_checkpoint,
)


def collected(*checkpoints: dict) -> res.Collected:
    got = res.Collected()
    for c in checkpoints:
        got.add(c)
    return got


def three_iterations(**second: object) -> res.Collected:
    """A boot, then iterations 1 and 3 valid at once, iteration 2 as `second` says."""
    return collected(boot_checkpoint(1),
                     suite_checkpoint("cpu", 1, 101.0, T0 + 10),
                     suite_checkpoint("cpu", 2, 102.0, T0 + 20, **second),
                     suite_checkpoint("cpu", 3, 103.0, T0 + 60))


def test_metrics_json_carries_every_attempt_with_its_conditions_and_a_summary_per_step():
    docs = res.build(RUN, DTYPE, SUITES, three_iterations(invalid_attempts=1))
    doc = json.loads(docs.files["metrics.json"][0])
    assert [r["iteration"] for r in doc["records"]] == [1, 2, 3]
    assert all(r["conditions"]["before"]["cpufreq"]["policy0"]["governor"] == "performance"
               for r in doc["records"])
    assert doc["records"][1]["conditions"]["retake"] == 1
    (retaken,) = doc["retaken"]     # kept with its reasons and its own raw output
    assert retaken["iteration"] == 2 and retaken["conditions"]["valid"] is False
    assert retaken["conditions"]["invalid"] == [THROTTLED]
    assert retaken["artifact"] == "raw/cpu-2-retake-0.out"
    assert retaken["conditions"]["power"]["samples"][0] == [T0 + 20, 1800.0]
    summary = doc["conditions"]["cpu"]
    assert summary == {
        "simulated": True, "iterations": 3, "validIterations": 3, "invalidAttempts": 1,
        "frequencyMHz": {"min": 1000.0, "median": 1000.0, "max": 1000.0},   # the valid only
        "governors": ["performance"], "temperatureC": {"min": 45.0, "max": 52.0},
        "busyBefore": {"min": 0.02, "max": 0.02}, "throttleEvents": 0,
        "energyJ": 4.0, "averageW": 2.0,
        "rails": {"vdd_core": {"energyJ": 3.0, "averageW": 1.5},
                  "vdd_ddr": {"energyJ": 1.0, "averageW": 0.5}}}
    assert docs.unmeasured == {} and docs.failed == []


def test_the_statistics_take_the_valid_iterations_only_and_the_energy_metrics_like_any_other():
    docs = res.build(RUN, DTYPE, SUITES, three_iterations(invalid_attempts=2))
    by_name = {s["name"]: s["values"] for s in docs.doc["series"]}
    assert by_name["sysbench-cpu-events"] == [101.0, 102.0, 103.0]   # no retaken 51.0
    assert by_name["energy"] == [4.0, 4.0, 4.0] and by_name["average-power"] == [2.0] * 3
    assert by_name["sysbench-cpu-events-per-watt"] == [50.5, 51.0, 51.5]
    assert docs.doc["conditions"]["cpu"]["invalidAttempts"] == 2
    assert "invalid" not in docs.results["suites"]["cpu"]


def test_an_iteration_whose_every_attempt_was_invalid_counts_no_value_and_the_run_succeeds():
    docs = res.build(RUN, DTYPE, SUITES, three_iterations(invalid_attempts=2, last_invalid=True))
    by_name = {s["name"]: s["values"] for s in docs.doc["series"]}
    assert by_name["sysbench-cpu-events"] == [101.0, 103.0]
    summary = docs.doc["conditions"]["cpu"]
    assert (summary["validIterations"], summary["invalidAttempts"]) == (2, 3)
    assert docs.results["suites"]["cpu"]["invalid"] == 1
    assert docs.unmeasured == {}
    assert run_end(docs, 1, 3, "vb-0")[:2] == (Phase.succeeded, Reason.completed)


def test_a_step_with_no_valid_measurement_ends_the_run_outside_its_envelope():
    got = collected(boot_checkpoint(1),
                    *(suite_checkpoint("cpu", i, 100.0, T0 + 40 * i, invalid_attempts=2,
                                       last_invalid=True) for i in (1, 2)))
    docs = res.build(RUN, DTYPE, SUITES, got)
    assert docs.unmeasured == {"cpu": [THROTTLED]}
    assert docs.doc["series"] == [] and docs.doc["conditions"]["cpu"]["validIterations"] == 0
    assert len(docs.doc["retaken"]) == 4 and len(docs.doc["records"]) == 2
    phase, reason, message = run_end(docs, 1, 2, "vb-0")
    assert (phase, reason) == (Phase.failed, RunFailure.outside_envelope)
    assert reason == "OutsideEnvelope"
    assert "no valid measurement of 1 step(s)" in message and f"cpu: {THROTTLED}" in message
    assert "neither the build nor the board" in message
    assert blame(reason) == Blame.lab       # not the run's (its build's): a CI may retry it
    report = docs.files["report.md"][0].decode()
    assert report.count("| no |") == 6 and THROTTLED in report


def test_a_failed_suite_is_the_end_before_an_unmeasured_step():
    got = collected(suite_checkpoint("cpu", 1, 100.0, T0, last_invalid=True),
                    {"kind": "suite", "record": {**record("io", 1, 1.0, None), "error": "boom"}})
    docs = res.build(RUN, DTYPE, [*SUITES, SUITES[0].model_copy(update={"name": "io"})], got)
    assert docs.unmeasured == {"cpu": [THROTTLED]} and docs.failed == ["io"]
    assert run_end(docs, 0, 2, "vb-0")[1] == Reason.suites_failed


def test_a_message_names_at_most_three_steps_and_bounds_each():
    long = "x" * 5000
    got = collected(*(suite_checkpoint(f"s{i}", 1, 1.0, T0 + i, last_invalid=True, reason=long)
                      for i in range(6)))
    docs = res.build(RUN, DTYPE, SUITES, got)
    _, reason, message = run_end(docs, 0, 6, "vb-0")
    assert reason == RunFailure.outside_envelope
    assert "(and 3 more step(s))" in message and len(message) < 1500


def test_a_checkpoint_read_again_on_resume_keeps_its_retaken_attempts_once():
    c = suite_checkpoint("cpu", 1, 100.0, T0, invalid_attempts=1)
    got = collected(c, c)
    assert len(got.retaken_records()) == 1
    assert got.retaken[("cpu", 1)][0].conditions["retake"] == 0


def test_an_ab_run_says_what_each_side_was_measured_under():
    got = res.Collected()
    for i in (1, 2):
        got.add(boot_checkpoint(i, side="a"))
        got.add(suite_checkpoint("cpu", i, 100.0, T0 + 100 * i, side="a"))
        got.add(boot_checkpoint(i, side="b"))
        got.add(suite_checkpoint("cpu", i, 90.0, T0 + 100 * i + 50, side="b",
                                 invalid_attempts=1, last_invalid=True))
    docs = res.build_ab(RUN, DTYPE, SUITES, got, {"a": "v1", "b": "v2"})
    a, b = docs.doc["sides"]["v1"], docs.doc["sides"]["v2"]
    assert a["conditions"]["cpu"]["validIterations"] == 2 and a["retaken"] == []
    assert b["conditions"]["cpu"]["validIterations"] == 0 and len(b["retaken"]) == 2
    assert b["conditions"]["cpu"]["invalidAttempts"] == 4
    assert docs.unmeasured == {"cpu on B (v2)": [THROTTLED]}
    assert run_end(docs, 4, 4, "vb-0")[1] == RunFailure.outside_envelope
    report = docs.files["report.md"][0].decode()
    assert report.count("## Measured under") == 2
    html_b = docs.files["report-b.html"][0].decode()
    assert THROTTLED.replace("'", "&#39;") in html_b and 'aria-label="conditions timeline"' in html_b


def test_a_device_type_without_conditions_records_none_and_says_nothing_of_them():
    from benchfarm.api.devicetype import BootSpec, DeviceType
    plain = DeviceType(name="t", labgrid="t.labgrid.yaml", boot=BootSpec())
    got = collected({"kind": "suite", "record": record("cpu", 1, 1.0, None)})
    docs = res.build(RUN, plain, SUITES, got)
    assert docs.doc["conditions"] == {} and docs.doc["retaken"] == []
    assert "Measured under" not in docs.files["report.md"][0].decode()
    assert "conditions timeline" not in docs.files["report.html"][0].decode()


def test_a_step_measured_hot_and_slow_says_so_in_its_summary_and_simulated_comes_from_records():
    recs = [record("cpu", i, 1.0, conditions(T0 + 10 * i, mhz=mhz, temp=temp, governor=gov,
                                            simulated=False))
            for i, (mhz, temp, gov) in enumerate([(1000, 40, "performance"),
                                                  (800, 70, "schedutil"),
                                                  (900, 55, "performance")], 1)]
    summary = cond.summaries(cond.attempts(recs))["cpu"]
    assert summary["frequencyMHz"] == {"min": 800.0, "median": 1000.0, "max": 1000.0}
    assert summary["governors"] == ["performance", "schedutil"]
    assert summary["temperatureC"] == {"min": 40.0, "max": 77.0}
    assert summary["simulated"] is False
    assert cond.summaries(cond.attempts(recs), simulated=True)["cpu"]["simulated"] is True


def test_conditions_that_do_not_read_as_step_conditions_give_no_facts_and_no_error():
    bad = [record("cpu", 1, 1.0, {"before": {"t": "soon"}, "valid": False}),
           record("cpu", 2, 1.0, {"power": {"energyJ": float("nan"), "averageW": float("inf"),
                                            "seconds": 1.0}}),
           record("cpu", 3, 1.0, {"before": {"t": 1.0, "cpufreq": {"p": {"curKHz": 10 ** 40}},
                                             "throttle": {"x": 10 ** 30}},
                                  "after": {"t": 2.0, "throttle": {"x": -(10 ** 30)}}})]
    first, second, third = cond.attempts(bad)
    assert (first.recorded, first.valid, first.reasons) == (
        True, False, ("its conditions could not be read",))
    assert second.energy_j is None and second.average_w is None and second.valid
    assert third.frequencies == () and third.throttle_events == 0
    assert cond.unmeasured(cond.attempts(bad[:1])) == {"cpu": ["its conditions could not be read"]}


BIG = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                st.sampled_from([1e308, -1e308, 1.7976931348623157e308, 5e-324, 0.0]))


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(values=st.lists(st.tuples(BIG, BIG, BIG, BIG, st.integers(-(2 ** 70), 2 ** 70)),
                       min_size=1, max_size=6))
def test_a_summary_of_any_figures_is_finite_json(values):
    """A board may say 1e308 W in every iteration: their mean is no OverflowError (fsum's) and
    the summary is JSON metrics.json can hold."""
    recs = []
    for i, (watts, temp, busy, t, khz) in enumerate(values, 1):
        c = conditions(T0 + 10 * i)
        c["power"].update(energyJ=watts, averageW=watts)
        c["power"]["rails"]["vdd_core"] = {"energyJ": watts, "averageW": watts}
        c["before"].update(t=t, busy=busy)
        c["before"]["thermal"]["thermal_zone0"]["tempC"] = temp
        c["during"][0]["cpufreq"]["policy0"]["curKHz"] = khz
        recs.append(record("cpu", i, 1.0, c))
    summary = cond.summaries(cond.attempts(recs))
    json.dumps(summary, allow_nan=False)
    assert summary["cpu"]["validIterations"] == len(values)
