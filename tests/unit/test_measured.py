"""What results were measured under (core.statistics.measured): a step's counted iterations in a
few numbers, and the differences a change point says beside the build (issue 56, item 4)."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from benchfarm.api.conditions import (
    CpuPolicy,
    Snapshot,
    StepConditions,
    StepPower,
    ThermalZone,
)
from benchfarm.core.statistics.measured import (
    Measured,
    around,
    by_step,
    counted,
    counted_series,
    differences,
    from_summary,
    note,
    overall,
)


def snap(t: float, khz: list[int], temp: float, governor: str = "performance") -> Snapshot:
    return Snapshot(t=t, cpufreq={f"policy{i}": CpuPolicy(curKHz=k, minKHz=200_000,
                                                          maxKHz=1_000_000, governor=governor)
                                  for i, k in enumerate(khz)},
                    thermal={"thermal_zone0": ThermalZone(type="cpu-thermal", tempC=temp)})


def conditions(khz: int = 1_000_000, temp: float = 45.0, *, valid: bool = True,
               watts: float | None = 2.0, governor: str = "performance",
               simulated: bool = False) -> dict:
    return StepConditions(
        before=snap(0, [khz, khz], temp, governor),
        during=[snap(1, [khz, khz // 2], temp + 3, governor)],
        after=snap(2, [khz, khz], temp + 5, governor),
        power=StepPower(seconds=2, energyJ=2 * watts, averageW=watts) if watts else None,
        valid=valid, invalid=[] if valid else ["frequency 500 MHz below 1000 MHz"],
        simulated=simulated).model_dump(mode="json")


def record(step: str = "cpu", iteration: int = 1, **kw) -> dict:
    warmup = kw.pop("warmup", False)
    error = kw.pop("error", None)
    return {"step": step, "suite": "sysbench", "iteration": iteration, "warmup": warmup,
            "exitCode": 0, "seconds": 2.0, "error": error, "artifact": None,
            "metrics": [{"name": "sysbench-cpu-events", "value": 100.0, "unit": "events/s",
                         "higherIsBetter": True}], "conditions": conditions(**kw)}


def doc(*records: dict, retaken: tuple[dict, ...] = ()) -> dict:
    return {"records": list(records), "retaken": list(retaken)}


def test_a_steps_counted_iterations_in_a_few_numbers():
    got = by_step(doc(*[record(iteration=i, watts=1.0 + i) for i in (1, 2)]))
    assert got == {"cpu": Measured(iterations=2, min_mhz=500.0, median_mhz=1000.0,
                                   max_mhz=1000.0, governors=("performance",), min_temp_c=45.0,
                                   max_temp_c=50.0, mean_power_w=2.5, simulated=False)}


def test_warm_ups_failed_invalid_and_retaken_iterations_do_not_count():
    assert not counted(record(warmup=True)) and not counted(record(error="exit 1"))
    assert not counted(record(valid=False)) and counted(record())
    assert counted({"step": "x", "warmup": False, "error": None})    # no envelope: counts
    got = overall(doc(record(khz=600_000, temp=90.0, valid=False), record(warmup=True, khz=1),
                      record(iteration=3), retaken=(record(iteration=3, khz=300_000,
                                                           temp=95.0, valid=False),)))
    assert got is not None and got.iterations == 1 and got.min_mhz == 500.0
    assert got.max_temp_c == 50.0
    assert overall(doc(record(valid=False))) is None and by_step(doc(record(valid=False))) == {}
    assert overall(doc({"step": "cpu", "warmup": False, "error": None})) is None


def test_conditions_that_do_not_validate_give_no_figures_not_an_exception():
    bad = record()
    bad["conditions"] = {"before": {"t": "yesterday"}, "valid": True}
    assert overall(doc(bad)) == Measured(1)        # it counted, and said nothing readable
    assert by_step(doc({**record(), "conditions": "hot"})) == {}


def test_governors_are_bounded_and_the_source_said_simulated():
    got = overall(doc(*[record(iteration=i, governor=f"{i}{'g' * 40}") for i in range(6)]))
    assert got is not None and got.governors == tuple(f"{i}{'g' * 31}" for i in range(4))
    got = overall(doc(record(simulated=True), record(iteration=2)))
    assert got is not None and got.simulated is True


def test_the_documents_own_summary_is_read_where_it_has_one():
    summary = {"simulated": True, "validIterations": 3, "governors": ["schedutil"],
               "frequencyMHz": {"min": 600.0, "median": 800.0, "max": 1000.0},
               "temperatureC": {"min": 40.0, "max": 61.5}, "averageW": 1.25}
    said = {**doc(record()), "conditions": {"cpu": summary, "odd": "not a summary",
                                            "idle": {**summary, "validIterations": 0}}}
    assert by_step(said) == {"cpu": Measured(3, 600.0, 800.0, 1000.0, ("schedutil",), 40.0,
                                             61.5, 1.25, True)}


def test_by_step_keeps_steps_apart_and_leaves_out_steps_without_conditions():
    plain = {"step": "boot-probe", "warmup": False, "error": None, "metrics": []}
    got = by_step(doc(record("cpu", khz=1_000_000), record("mem", khz=800_000), plain))
    assert list(got) == ["cpu", "mem"] and got["mem"].max_mhz == 800.0
    whole = overall(doc(record("cpu", khz=1_000_000), record("mem", khz=800_000), plain))
    assert whole is not None and (whole.min_mhz, whole.max_mhz) == (400.0, 1000.0)


def test_a_summary_without_counted_iterations_is_none():
    assert from_summary({"validIterations": 0, "frequencyMHz": {"min": 1}}) is None
    assert from_summary({"validIterations": 2, "frequencyMHz": {"min": float("nan")},
                         "averageW": "2"}) == Measured(2)


def m(mhz: float = 1000.0, temp: float = 50.0, governors: tuple[str, ...] = ("performance",)
      ) -> Measured:
    return Measured(3, mhz / 2, mhz, mhz, governors, temp - 5, temp, 2.0)


def test_differences_name_frequency_governor_and_temperature_with_their_values():
    assert differences([m()] * 3, [m(600.0)] * 3) == ["frequency 1000 → 600 MHz"]
    assert differences([m()], [m(governors=("powersave",))]) == [
        "governor performance → powersave"]
    assert differences([m(temp=45)], [m(temp=71)]) == ["temperature 45 → 71 °C"]
    both = differences([m()], [m(600.0, 80.0, ("ondemand",))])
    assert both == ["frequency 1000 → 600 MHz", "governor performance → ondemand",
                    "temperature 50 → 80 °C"]
    assert note(both[:1]) == "measured under other conditions: frequency 1000 → 600 MHz"
    assert note([]) == ""


def test_small_changes_and_missing_sides_claim_nothing():
    assert differences([m(1000.0, 50.0)], [m(960.0, 59.0)]) == []        # 4 %, 9 °C
    assert differences([m(1000.0)], [m(1060.0)]) == ["frequency 1000 → 1060 MHz"]
    assert differences([None, None], [m(600.0)]) == []
    assert differences([m()], []) == []
    # the median of the runs: one odd run does not make a difference
    assert differences([m(), m(), m(500.0)], [m(), m(990.0), m()]) == []


def test_each_change_point_is_judged_on_the_runs_since_the_previous_one_and_up_to_the_next():
    runs = [m()] * 4 + [m(600.0)] * 4 + [m(600.0, 80.0)] * 4
    assert around([4, 8], runs) == [["frequency 1000 → 600 MHz"], ["temperature 50 → 80 °C"]]
    assert around([], runs) == []
    assert around([2], [None, None, m(), m()]) == [[]]


def test_figures_are_shown_plainly():
    assert differences([m(1400.0)], [m(1200.0)]) == ["frequency 1400 → 1200 MHz"]
    assert differences([m(2.0)], [m(1.5)]) == ["frequency 2 → 1.5 MHz"]


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=8)
_METRIC = st.fixed_dictionaries({"name": st.sampled_from(["a", "b"]), "unit": st.sampled_from(
    ["s", "MB/s", None]), "value": _JSON | st.floats(allow_nan=True)})
_RECORD = st.fixed_dictionaries({"step": st.sampled_from(["x", "y"]), "warmup": _JSON,
                                 "error": _JSON, "metrics": st.lists(_METRIC, max_size=3),
                                 "conditions": _JSON | st.just(conditions())})
_SUMMARY = st.dictionaries(st.sampled_from(["validIterations", "frequencyMHz", "temperatureC",
                                            "governors", "averageW", "simulated"]), _JSON)


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(records=st.lists(_RECORD | _JSON, max_size=5),
       series=st.lists(st.fixed_dictionaries({"step": st.sampled_from(["x", "y"]),
                                              "name": st.sampled_from(["a", "b"]),
                                              "unit": st.sampled_from(["s", "MB/s"]),
                                              "values": _JSON}) | _JSON, max_size=4),
       said=st.none() | st.dictionaries(st.sampled_from(["x", "y"]), _SUMMARY | _JSON,
                                        max_size=2))
def test_any_document_reads_without_raising_and_only_counted_finite_values_are_samples(
        records, series, said):
    """A metrics.json is its session's output, or a tenant's who holds the store credential:
    whatever it holds, the history reads it without raising."""
    doc = {"records": records, "series": series, **({"conditions": said} if said else {})}
    got = counted_series(doc)
    for s in got["series"]:
        assert s["values"] and all(isinstance(v, float) and v == v for v in s["values"])
    allowed = {m["value"] for r in records if isinstance(r, dict) and counted(r)
               and isinstance(r.get("metrics"), list) for m in r["metrics"]
               if isinstance(m, dict) and isinstance(m.get("value"), int | float)}
    assert {v for s in got["series"] for v in s["values"]} <= {float(v) for v in allowed}
    for m in by_step(doc).values():
        assert m.iterations >= 1
    overall(doc)
