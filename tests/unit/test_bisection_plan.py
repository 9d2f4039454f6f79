"""What a bisection does next (core.bisection.plan), its runs played by a simulated lab: one run
at a time on the first run's board, more pairs when they do not decide, a build that does not
boot skipped, a lab fault measured again, a restart that redoes nothing."""

from __future__ import annotations

from benchfarm.api.bisections import BenchmarkBisectionSpec, BisectionReason
from benchfarm.api.outcomes import BisectionAnswer, StepVerdict
from benchfarm.core.bisection.plan import answer_status, pairs_of, plan, run_name

BISECTION = {"metadata": {"name": "hb", "namespace": "team-a", "uid": "u-1"}}
SPEC = {"metric": "hackbench/time (s)", "plan": "hackbench",
        "selector": {"deviceType": "qemu-arm64-a53-icount"},
        "good": {"name": "v0", "bootArgs": "benchfarm.build=0"},
        "builds": [{"name": f"v{i}", "bootArgs": f"benchfarm.build={i}"} for i in range(1, 18)]}


def spec(**over) -> BenchmarkBisectionSpec:
    return BenchmarkBisectionSpec(**{**SPEC, **over})


class Lab:
    """Finishes each run the plan makes: `outcome(build, batch)` is its phase and reason (or
    pairs: a list of (good, build) seconds); every run gets the board vb-icount-0."""

    def __init__(self, outcome):
        self.outcome, self.runs, self.pairs = outcome, [], {}

    def make(self, body, finish=True):
        labels = body["metadata"]["labels"]
        build, batch = int(labels["benchfarm.io/bisection-build"]), int(
            labels["benchfarm.io/bisection-batch"])
        run = {**body, "metadata": {**body["metadata"], "creationTimestamp":
                                    f"2026-12-04T00:00:{len(self.runs):02d}Z"},
               "status": {"phase": "Running", "board": "vb-icount-0"}}
        self.runs.append(run)
        if finish:
            self.finish(run, build, batch)
        return run

    def finish(self, run, build, batch):
        got = self.outcome(build, batch)
        if isinstance(got, list):
            assert len(got) == run["spec"]["iterations"]
            self.pairs[run["metadata"]["name"]] = got
            run["status"] = {"phase": "Succeeded", "board": "vb-icount-0"}
        else:
            phase, reason = got
            run["status"] = {"phase": phase, "board": "vb-icount-0", "conditions": [
                {"type": "Succeeded", "status": "False", "reason": reason, "message": "m"}]}

    def plan(self, s):
        return plan(BISECTION, s, self.runs, lambda run, build: self.pairs.get(
            run["metadata"]["name"]))

    def bisect(self, s, limit=100):
        for _ in range(limit):
            p = self.plan(s)
            if p.finished:
                return p
            assert len(p.create) == 1, p
            self.make(p.create[0])
        raise AssertionError("no end")


def slower_from(first, broken=(), noise=None):
    def outcome(build, batch):
        if build in broken:
            return "Failed", "SoftwareBootFailed"
        slow = 1.2 if build >= first else 1.0
        return [(10.0, 10.0 * slow)] * 3 if noise is None else noise(build, batch, slow)
    return outcome


def test_a_slowdown_from_the_11th_of_16_candidates_is_named_in_5_steps_on_one_board():
    lab = Lab(slower_from(10))
    p = lab.bisect(spec())
    assert p.found.kind == BisectionAnswer.culprit and p.found.first_bad == 10
    assert [(s.name, s.verdict) for s in p.steps] == [
        ("v9", "good"), ("v14", "bad"), ("v12", "bad"), ("v11", "bad"), ("v10", "good")]
    assert len(p.steps) == len(lab.runs) == 5 <= p.max_steps == 5 and p.pairs == 15
    first, *rest = lab.runs
    assert first["spec"]["selector"] == {"deviceType": "qemu-arm64-a53-icount"}
    assert all(r["spec"]["selector"] == {"board": "vb-icount-0"} for r in rest)
    assert first["spec"]["software"] == {"name": "v0", "bootArgs": "benchfarm.build=0"}
    assert first["spec"]["softwareB"] == {"name": "v9", "bootArgs": "benchfarm.build=9"}
    assert first["metadata"]["ownerReferences"][0] == {
        "apiVersion": "benchfarm.io/v1alpha1", "kind": "BenchmarkBisection", "name": "hb",
        "uid": "u-1", "controller": True}
    a = answer_status(spec(), p)
    assert (a.kind, a.firstBad, a.suspects, a.lastGood) == ("Culprit", "v11", ["v11"], "v10")
    assert a.effect == 0.2 and a.ci95 == [0.2, 0.2]


def test_an_unbootable_build_on_the_path_is_skipped_and_the_culprit_still_named():
    p = Lab(slower_from(10, broken={8})).bisect(spec())
    assert p.steps[0].name == "v9" and p.steps[0].verdict == StepVerdict.skip
    assert p.steps[0].message.startswith("SoftwareBootFailed")
    assert p.found.first_bad == 10 and len(p.steps) <= p.max_steps == 6


def test_no_slowdown_is_no_change_and_the_bad_end_was_measured():
    p = Lab(slower_from(99)).bisect(spec())
    assert p.found.kind == BisectionAnswer.no_change and p.steps[-1].name == "v17"
    assert answer_status(spec(), p).firstBad is None and len(p.steps) == 4 <= p.max_steps


def test_a_noisy_step_takes_another_run_of_pairs_on_the_same_board():
    def noise(build, batch, slow):      # build 8's first three pairs cannot decide alone
        if build == 8 and batch == 1:
            return [(10.0, 10.0), (10.0, 10.6), (10.0, 9.6)]
        return [(10.0, 10.0 * slow)] * 3
    lab = Lab(slower_from(10, noise=noise))
    p = lab.bisect(spec())
    assert p.steps[0].runs == ["hb-8-1", "hb-8-2"] and p.steps[0].pairs == 6
    assert p.steps[0].verdict == StepVerdict.good and p.found.first_bad == 10
    bound = Lab(slower_from(10, noise=lambda b, n, s: [(10.0, 10.0), (10.0, 11.0), (10.0, 9.0)]))
    p = bound.bisect(spec(maxPairs=6))
    assert {s.verdict for s in p.steps} == {StepVerdict.unclear}    # never decided: the bound
    assert all(s.pairs == 6 for s in p.steps) and p.found.kind == BisectionAnswer.inconclusive


def test_a_lab_fault_measures_the_step_again_three_times_at_most():
    faults = Lab(lambda build, batch: ("Failed", "CoordinatorUnreachable") if batch < 3
                 else [(10.0, 10.0)] * 3)
    p = faults.bisect(spec())
    assert p.steps[0].runs == ["hb-8-1", "hb-8-2", "hb-8-3"] and p.steps[0].labFaults == 2
    assert p.steps[0].verdict == StepVerdict.good
    always = Lab(lambda build, batch: ("Failed", "StoreUnreachable"))
    p = always.bisect(spec())
    assert p.failure[0] == BisectionReason.lab_faults and len(always.runs) == 3
    assert "3 runs failed on the lab" in p.failure[1]


def test_the_bisections_own_input_refused_fails_it_and_a_missing_metric_too():
    p = Lab(lambda build, batch: ("Failed", "ArtifactForbidden")).bisect(spec())
    assert p.failure[0] == BisectionReason.run_failed and "ArtifactForbidden" in p.failure[1]
    lab = Lab(slower_from(10))
    lab.make(lab.plan(spec()).create[0])
    lab.pairs.clear()                      # its metrics.json had no such metric
    assert lab.plan(spec()).failure[0] == BisectionReason.metric_missing


def test_a_restart_replays_the_runs_and_makes_no_run_twice():
    lab = Lab(slower_from(10))
    for _ in range(3):
        lab.make(lab.plan(spec()).create[0])
    going = lab.make(lab.plan(spec()).create[0], finish=False)
    again = lab.plan(spec())                            # the operator restarted: the same course
    assert again.create == [] and [s.verdict for s in again.steps][:3] == ["good", "bad", "bad"]
    assert again.steps[-1].verdict is None and again.steps[-1].runs == [going["metadata"]["name"]]
    cancelled = lab.plan(spec(cancel=True))
    assert cancelled.cancel == [going["metadata"]["name"]] and not cancelled.finished


def test_runs_of_an_older_namesake_are_not_this_bisections():
    lab = Lab(slower_from(10))
    old = lab.make(lab.plan(spec()).create[0])
    old["metadata"]["labels"] = {**old["metadata"]["labels"], "benchfarm.io/bisection-uid": "u-0"}
    p = lab.plan(spec())
    assert [r["metadata"]["name"] for r in p.create] == ["hb-8-1"] and p.steps[0].runs == ["hb-8-1"]


def test_pairs_are_the_two_sides_iterations_that_both_counted():
    def side(values, invalid=()):
        return {"records": [{"step": "hackbench", "iteration": i, "metrics": [
            {"name": "time", "unit": "s", "value": v}], **({"conditions": {"valid": False}}
                                                          if i in invalid else {})}
            for i, v in enumerate(values, 1)]}
    doc = {"sides": {"v0": side([1.0, 2.0, 3.0]), "v9": side([1.5, 2.5, 3.5], invalid={2})}}
    assert pairs_of(doc, "hackbench/time (s)", "v0", "v9") == [(1.0, 1.5), (3.0, 3.5)]
    assert pairs_of(doc, "hackbench/other (s)", "v0", "v9") is None
    assert pairs_of(doc, "hackbench/time (s)", "v0", "v8") is None and pairs_of(None, "a (s)", "x", "y") is None


def test_a_long_name_keeps_its_runs_apart_within_63_characters():
    long = "a" * 63
    names = {run_name(long, b, n) for b in range(20) for n in range(1, 4)}
    assert len(names) == 60 and all(len(x) <= 63 for x in names)


def test_the_cli_record_of_a_finished_bisection_names_its_culprit_as_git_would():
    from benchfarm.cli.bisect import record
    p = Lab(slower_from(10, broken={8})).bisect(spec())
    body = {**BISECTION, "spec": SPEC, "status": {
        "steps": [s.model_dump(exclude_defaults=True) for s in p.steps]}}
    lines = record(body).splitlines()
    assert lines[:5] == ["git bisect start", "# bad: [v17] benchfarm.build=17", "git bisect bad v17",
                         "# good: [v0] benchfarm.build=0", "git bisect good v0"]
    assert "# skip: [v9] benchfarm.build=9 — SoftwareBootFailed: m" in lines
    assert "git bisect skip v9" in lines
    assert "# bad: [v11] benchfarm.build=11 — +20.0% worse (95 % CI +20.0% to +20.0%, 3 pairs)" in lines
    assert lines[-1] == "# first bad commit: [v11] benchfarm.build=11"
    going = {**body, "status": {"steps": [*body["status"]["steps"][:2], {"build": 13, "name": "v14"}]}}
    so_far = record(going)                                               # the record so far
    assert so_far.splitlines()[-1] == "git bisect good v10" and "first bad" not in so_far


def test_a_finished_bisection_is_a_bisectionfinished_event_with_its_answer():
    from benchfarm.core.notifications.events import bisection_event
    body = {"metadata": {**BISECTION["metadata"], "generation": 2}, "spec": SPEC, "status": {
        "phase": "Succeeded", "pairs": 15, "boardSeconds": 412.5, "steps": [{}] * 5,
        "answer": {"kind": "Culprit", "firstBad": "v11", "lastGood": "v10", "effect": 0.2},
        "conditions": [{"type": "Succeeded", "status": "True", "reason": "CulpritFound",
                        "message": "first bad build v11", "lastTransitionTime": "2026-12-04T03:00:00Z"}]}}
    event = bisection_event(body)
    assert event.kind == "BisectionFinished" and event.key == "BisectionFinished/u-1/2"
    assert event.object.kind == "BenchmarkBisection" and event.namespace == "team-a"
    assert event.details["answer"]["firstBad"] == "v11" and event.details["steps"] == 5
    assert event.summary == "bisection team-a/hb CulpritFound: first bad build v11"
    going = {**body, "status": {"conditions": [{"type": "Succeeded", "status": "Unknown",
                                                "lastTransitionTime": "x"}]}}
    assert bisection_event(going) is None


def test_a_board_the_lab_failed_on_first_is_not_where_the_steps_go():
    lab = Lab(lambda build, batch: ("Failed", "SerialSilent") if batch == 1 else [(10.0, 10.0)] * 3)
    lab.make(lab.plan(spec()).create[0])
    lab.runs[0]["status"]["board"] = "vb-icount-broken"
    again = lab.plan(spec())
    assert again.board is None and again.create[0]["spec"]["selector"] == {
        "deviceType": "qemu-arm64-a53-icount"}
    lab.make(again.create[0])
    assert lab.plan(spec()).board == "vb-icount-0"


def test_a_template_over_revisions_is_the_builds_listed_with_each_revisions_urls_and_digests():
    url = "https://ci.example/builds/{rev}"
    templated = BenchmarkBisectionSpec(**{**{k: v for k, v in SPEC.items() if k not in (
        "good", "builds")}, "template": {
            "kernel": {"url": url + "/Image", "sha256Url": url + "/SHA256SUMS"},
            "bootArgs": "quiet"}, "goodRevision": "a1b2c3", "revisions": ["d4e5f6", "0789ab"]})
    assert templated.good_build.name == "a1b2c3" and [b.name for b in templated.builds] == [
        "d4e5f6", "0789ab"]
    kernel = templated.builds[1].kernel
    assert kernel is not None and kernel.url == "https://ci.example/builds/0789ab/Image"
    assert kernel.sha256Url == "https://ci.example/builds/0789ab/SHA256SUMS"
    assert templated.builds[1].bootArgs == "quiet"
    p = plan(BISECTION, templated, [], lambda run, build: [])
    first = p.create[0]
    revision = templated.revisions[int(first["metadata"]["labels"]["benchfarm.io/bisection-build"])]
    assert first["spec"]["softwareB"]["name"] == revision
    assert first["spec"]["softwareB"]["kernel"] == {
        "url": f"https://ci.example/builds/{revision}/Image",
        "sha256Url": f"https://ci.example/builds/{revision}/SHA256SUMS"}
    assert first["spec"]["software"]["kernel"]["sha256Url"] == \
        "https://ci.example/builds/a1b2c3/SHA256SUMS"


def test_a_bisection_names_its_builds_one_way():
    import pytest
    from pydantic import ValidationError
    bare = {k: v for k, v in SPEC.items() if k not in ("good", "builds")}
    for body in (bare, {**bare, "template": {"bootArgs": "x"}, "goodRevision": "r0"},
                 {**SPEC, "builds": []}):
        with pytest.raises(ValidationError, match="give good and builds, or template"):
            BenchmarkBisectionSpec(**body)


def test_a_board_that_fails_mid_bisection_is_left_and_its_step_measured_again_elsewhere():
    """Steps on vb-icount-0 until its second step's second run fails on the lab there: the next
    run may go to any board of the type (vb-icount-1 takes it), the step's pairs are that
    board's only (vb-icount-0's first run of it dropped), and every later step goes there."""
    def noise(build, batch, slow):       # the second step (build 13) needs two runs of pairs
        if build == 13 and batch == 1:
            return [(10.0, 10.0), (10.0, 12.6), (10.0, 11.6)]
        return [(10.0, 10.0 * slow)] * 3
    lab = Lab(slower_from(10, noise=noise))
    for _ in range(2):
        lab.make(lab.plan(spec()).create[0])            # hb-8-1 (good), hb-13-1 (undecided)
    retry = lab.plan(spec()).create[0]
    assert retry["metadata"]["name"] == "hb-13-2" and retry["spec"]["selector"] == {"board": "vb-icount-0"}
    lab.make(retry, finish=False)
    lab.runs[-1]["status"] = {"phase": "Failed", "board": "vb-icount-0", "conditions": [
        {"type": "Succeeded", "status": "False", "reason": "SerialSilent", "message": "m"}]}
    again = lab.plan(spec())
    assert again.board is None and again.create[0]["metadata"]["name"] == "hb-13-3"
    assert again.create[0]["spec"]["selector"] == {"deviceType": "qemu-arm64-a53-icount"}
    lab.make(again.create[0])
    lab.runs[-1]["status"]["board"] = "vb-icount-1"
    p = lab.plan(spec())
    step = p.steps[1]
    assert step.runs == ["hb-13-1", "hb-13-2", "hb-13-3"] and step.pairs == 3 and step.labFaults == 1
    assert step.verdict == StepVerdict.bad and "measured again on vb-icount-1" in step.message
    assert p.board == "vb-icount-1" and p.create[0]["spec"]["selector"] == {"board": "vb-icount-1"}
