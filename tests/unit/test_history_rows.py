"""metrics.json -> rows of the results database (benchfarm.history.index.rows), and whose run a
stored document is (benchfarm.core.policy.runkey): pure."""

import datetime as dt

from benchfarm.core.policy.runkey import RunKey, disagreement, is_run_document, run_of_key
from benchfarm.history.index import rows

WHERE = RunKey("team-a", "nightly-1", "u-1")

RUN = {"namespace": "team-a", "name": "nightly-1", "uid": "u-1", "board": "vb-a53-0",
       "deviceType": "qemu-arm64-a53", "plan": "nightly", "labels": {"benchfarm.io/release": "11.01"},
       "finishedAt": "2026-11-25T20:00:00Z"}
SERIES = [{"step": "sysbench-cpu", "name": "sysbench-cpu-events", "unit": "events/s",
           "higherIsBetter": True, "values": [100.0, 110.0, 90.0]},
          {"step": "cyclictest", "name": "cyclictest-max", "unit": "us", "higherIsBetter": False,
           "values": [50.0, 70.0]}]


def side(kernel):
    return {"series": SERIES, "boots": [{"kernel-to-prompt": 9.5}, {"kernel-to-prompt": 9.7}],
            "bootSummary": {"kernel-to-prompt": {}},
            "provenance": {"kernelRelease": kernel, "planDigest": "sha256:abc"}}


def test_one_row_per_metric_with_every_sample_direction_and_the_runs_identity():
    doc = {"run": {**RUN, "softwareSets": {"cloud": {"name": "cloud",
                                                        "digests": {"kernel": "f" * 64}}}},
           **side("6.1.0-cloud-arm64")}
    got = {r["metric"]: r for r in rows(doc, WHERE)}
    assert set(got) == {"sysbench-cpu/sysbench-cpu-events", "cyclictest/cyclictest-max",
                        "boot/kernel-to-prompt"}
    cpu = got["sysbench-cpu/sysbench-cpu-events"]
    assert cpu["samples"] == [100.0, 110.0, 90.0] and cpu["mean"] == 100.0 and cpu["n"] == 3
    assert cpu["unit"] == "events/s" and cpu["higher_is_better"] is True
    assert got["cyclictest/cyclictest-max"]["higher_is_better"] is False
    assert got["boot/kernel-to-prompt"]["samples"] == [9.5, 9.7]
    assert got["boot/kernel-to-prompt"]["higher_is_better"] is False
    assert cpu["software"] == "cloud" and cpu["software_digests"] == {"kernel": "f" * 64}
    assert cpu["kernel_release"] == "6.1.0-cloud-arm64" and cpu["plan_digest"] == "sha256:abc"
    assert cpu["labels"] == {"benchfarm.io/release": "11.01"} and cpu["side"] == ""
    assert cpu["time"] == dt.datetime(2026, 11, 25, 20, 0, tzinfo=dt.UTC)
    assert (cpu["namespace"], cpu["name"], cpu["run_uid"], cpu["board"], cpu["device_type"],
            cpu["plan"]) == ("team-a", "nightly-1", "u-1", "vb-a53-0", "qemu-arm64-a53", "nightly")


def test_an_ab_run_gives_each_side_its_rows_and_software():
    doc = {"run": {**RUN, "ab": {"a": "old", "b": "new"},
                   "softwareSets": {"old": {"name": "old", "digests": {"kernel": "a" * 64}},
                                    "new": {"name": "new", "digests": {"kernel": "b" * 64}}}},
           "sides": {"old": side("6.1-old"), "new": side("6.12-new")}}
    got = rows(doc, WHERE)
    assert {r["side"] for r in got} == {"old", "new"} and len(got) == 6
    new = next(r for r in got if r["side"] == "new")
    assert new["software"] == "new" and new["kernel_release"] == "6.12-new"


def test_a_document_without_a_finish_time_takes_the_objects_time():
    when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    run = {k: v for k, v in RUN.items() if k != "finishedAt"}
    assert {r["time"] for r in rows({"run": run, "series": SERIES}, WHERE, when)} == {when}


def test_the_rows_identity_is_the_keys_whatever_the_document_says():
    """A metrics.json that claims team-b's run: its rows are still the run's of its key (and the
    indexer does not get that far: `disagreement` says why first)."""
    doc = {"run": {**RUN, "namespace": "team-b", "name": "theirs", "uid": "u-b"},
           **side("6.1")}
    got = rows(doc, WHERE)
    assert got and {(r["namespace"], r["name"], r["run_uid"]) for r in got} == {
        ("team-a", "nightly-1", "u-1")}


def test_a_run_is_read_from_its_keys_first_three_segments():
    assert run_of_key("team-a/nightly-1/u-1/metrics.json") == WHERE
    assert run_of_key("team-a/nightly-1/u-1/nightly/2026-11-25/metrics.json") == WHERE
    assert run_of_key("builds/metrics.json") is None
    assert run_of_key("team-a/../u-1/metrics.json") is None
    assert run_of_key("team-a//u-1/metrics.json") is None
    assert is_run_document("team-a/nightly-1/u-1/nightly/metrics.json")
    assert not is_run_document("team-a/nightly-1/u-1/raw/cyclictest/metrics.json")
    assert not is_run_document("team-a/nightly-1/u-1/report.html")
    assert not is_run_document("team-a/metrics.json")


def test_a_document_that_names_another_run_than_its_key_disagrees_and_says_how():
    assert disagreement({"run": dict(RUN)}, WHERE) is None
    for field, value in (("namespace", "team-b"), ("name", "other"), ("uid", "u-2")):
        why = disagreement({"run": {**RUN, field: value}}, WHERE)
        assert why is not None and value in why and "team-a/nightly-1" in why, why
    assert disagreement({"series": SERIES}, WHERE) == "it names no run"
    assert disagreement({"run": {k: v for k, v in RUN.items() if k != "uid"}}, WHERE) == \
        "it names no run"
    assert disagreement({"run": "team-a/nightly-1"}, WHERE) == "it names no run"


def test_the_history_commands_ask_the_scope_first_and_say_when_it_refuses(capsys, monkeypatch):
    """`benchfarm history` and `results series` show a namespace the caller may read: the scope
    (the CLI's: Kubernetes decides) is asked before the database, and a refusal is a sentence
    and exit 1, not a traceback; -n and -A do not go together."""
    import argparse

    import pytest

    from benchfarm.history.commands import ScopeRefused, register
    from benchfarm.settings import Settings
    asked = []

    def scope(namespace, everywhere, settings):
        asked.append((namespace, everywhere))
        raise ScopeRefused(f"you may not read the runs of namespace {namespace}")
    monkeypatch.delenv("BENCHFARM_DATABASE_URL", raising=False)
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="cmd"), scope)
    args = parser.parse_args(["history", "hb/hackbench-time", "--device-type", "qemu-x86",
                              "--plan", "(inline)", "-n", "team-b"])
    args.settings = Settings()              # what the CLI's `main` hands each command
    assert args.func(args) == 1
    assert "namespace team-b" in capsys.readouterr().err
    args = parser.parse_args(["results", "series", "-A"])
    args.settings = Settings()
    assert args.func(args) == 1
    assert asked == [("team-b", False), (None, True)]
    with pytest.raises(SystemExit):
        parser.parse_args(["results", "series", "-A", "-n", "team-a"])
