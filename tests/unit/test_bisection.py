"""The bisection core (benchfarm.core.bisection): a step's verdict from its pairs, the search
over builds with skipped and unclear ones, and its record replayed by git itself."""

import math
import os
import random
import subprocess

import pytest
from hypothesis import given, settings, strategies as st

from benchfarm.api.outcomes import BisectionAnswer, StepVerdict
from benchfarm.core.bisection.judge import judge
from benchfarm.core.bisection.log import Build, Step, render
from benchfarm.core.bisection.search import answer, bounds, max_steps, next_build

GOOD, BAD, SKIP, UNCLEAR = StepVerdict.good, StepVerdict.bad, StepVerdict.skip, StepVerdict.unclear


def search(n, oracle):
    """Run the search to its end: (the builds measured in order with their verdicts, the answer)."""
    verdicts, steps = {}, []
    while (build := next_build(n, verdicts)) is not None:
        assert build not in verdicts, f"build {build} measured twice"
        verdicts[build] = oracle(build)
        steps.append((build, verdicts[build]))
    return steps, answer(n, verdicts)


def slowdown_from(first, skipped=(), unclear=()):
    return lambda i: SKIP if i in skipped else UNCLEAR if i in unclear else BAD if i >= first else GOOD


# --- the scenario: 16 candidates between the good and the bad build (17 after the good)

def test_sixteen_candidates_with_a_slowdown_from_the_11th_name_it_in_at_most_5_steps():
    steps, found = search(17, slowdown_from(10))
    assert found.kind == BisectionAnswer.culprit and found.first_bad == 10
    assert found.suspects == (10,) and found.last_good == 9
    assert len(steps) <= 5 == max_steps(17)


@pytest.mark.parametrize("broken", range(17))
def test_an_unbootable_build_anywhere_still_names_the_11th_or_a_range_holding_it(broken):
    steps, found = search(17, slowdown_from(10, skipped={broken}))
    skips = [b for b, v in steps if v == SKIP]
    assert skips in ([], [broken])
    assert len(steps) <= max_steps(17, len(skips))
    if skips and broken in (9, 10):   # the culprit or its predecessor: git's "could be any of"
        assert found.kind == BisectionAnswer.range and found.suspects == (broken, broken + 1)
    else:
        assert (found.kind, found.first_bad, found.suspects) == (BisectionAnswer.culprit, 10, (10,))


def test_an_unbootable_build_is_reported_as_a_skip_when_the_path_meets_it():
    first = search(17, slowdown_from(10))[0]
    assert 6 not in [b for b, _ in first]      # the 7th is off the path: never measured
    assert search(17, slowdown_from(10, skipped={6}))[0] == first
    on_path = first[0][0]                      # the first step's build (the middle: the 9th)
    steps, found = search(17, slowdown_from(10, skipped={on_path}))
    assert (on_path, SKIP) in steps and found.first_bad == 10 and len(steps) <= max_steps(17, 1)


def test_no_slowdown_anywhere_is_no_change_not_the_bad_end():
    steps, found = search(17, lambda i: GOOD)
    assert found.kind == BisectionAnswer.no_change and found.first_bad is None
    assert found.suspects == () and found.last_good == 16
    assert steps[-1] == (16, GOOD) and len(steps) <= 5


def test_an_unclear_build_next_to_the_culprit_widens_the_answer_to_a_range():
    steps, found = search(17, slowdown_from(10, unclear={9}))
    assert found.kind == BisectionAnswer.range and found.suspects == (9, 10)
    assert found.last_good == 8


def test_no_bad_build_but_an_unclear_bad_end_is_inconclusive():
    steps, found = search(17, slowdown_from(99, unclear={16}))
    assert found.kind == BisectionAnswer.inconclusive and found.suspects == (16,)


def test_the_bounds_refuse_verdicts_outside_the_builds_and_a_search_without_builds():
    with pytest.raises(ValueError, match="outside"):
        bounds(4, {4: GOOD})
    with pytest.raises(ValueError, match="at least one build"):
        next_build(0, {})
    assert answer(3, {}) is None and next_build(1, {}) == 0


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 300).flatmap(lambda n: st.tuples(
    st.just(n), st.integers(0, n), st.sets(st.integers(0, n - 1), max_size=n),
    st.sets(st.integers(0, n - 1), max_size=n))))
def test_any_search_ends_within_its_bound_and_its_answer_holds_the_true_first_bad(case):
    """However many builds, wherever the change (or none: first == n), whichever skipped or
    unclear: at most ceil(log2(n + 1)) measured steps plus one per skipped or unclear one, and
    the true first bad build is among the suspects (alone in them for a culprit)."""
    n, first, skipped, unclear = case
    unclear -= skipped
    steps, found = search(n, slowdown_from(first, skipped, unclear))
    undecided = sum(v in (SKIP, UNCLEAR) for _, v in steps)
    assert len(steps) <= max_steps(n, undecided)
    if first < n:
        assert first in found.suspects
        if found.kind == BisectionAnswer.culprit:
            assert found.suspects == (first,) and found.first_bad == first
        if found.first_bad is None:        # every build from the first bad on skipped or unclear
            assert found.kind == BisectionAnswer.inconclusive
            assert set(found.suspects) <= skipped | unclear
        else:
            assert found.first_bad >= first and set(found.suspects[:-1]) <= skipped | unclear
    else:
        assert found.first_bad is None
        assert (found.kind == BisectionAnswer.no_change) == (not found.suspects)
        assert set(found.suspects) <= skipped | unclear


# --- a step's verdict from its pairs

def test_a_deterministic_board_decides_at_the_third_pair_each_way():
    assert judge([(100.0, 100.0)] * 3, True, 0.05, 12).verdict == GOOD
    assert judge([(100.0, 100.0)] * 2, True, 0.05, 12).verdict is None     # 3 pairs at least
    slow = judge([(100.0, 90.0)] * 3, True, 0.05, 12)                      # 10 % fewer per s
    assert slow.verdict == BAD and slow.effect == pytest.approx(0.10) and slow.low == slow.high
    assert judge([(100.0, 96.0)] * 3, True, 0.05, 12).verdict == UNCLEAR   # 4 %: below 5 %
    assert judge([(10.0, 11.0)] * 3, False, 0.05, 12).verdict == BAD       # latency: up is worse
    assert judge([(10.0, 9.0)] * 3, False, 0.05, 12).verdict == GOOD       # an improvement


def test_noise_is_measured_away_pair_by_pair_and_the_bound_ends_a_step_unclear():
    rng = random.Random(5)

    def pairs(effect, noise, count):
        out = []
        for _ in range(count):
            drift = 100 * (1 + rng.gauss(0, 0.05))          # the board's drift hits both sides
            out.append((drift * (1 + rng.gauss(0, noise)),
                        drift * (1 - effect) * (1 + rng.gauss(0, noise))))
        return out

    def pairs_needed(effect, noise, cap=40):
        seen = []
        for pair in pairs(effect, noise, cap):
            seen.append(pair)
            if (j := judge(seen, True, 0.05, cap)).verdict is not None:
                return j
        raise AssertionError("the bound did not end the step")

    quiet, slow = pairs_needed(0.0, 0.005), pairs_needed(0.10, 0.005)
    assert (quiet.verdict, slow.verdict) == (GOOD, BAD) and quiet.pairs <= 4 and slow.pairs <= 4
    noisy = [pairs_needed(0.10, 0.04) for _ in range(20)]      # 4 % per sample: 5.7 % per pair
    assert sum(j.verdict == BAD for j in noisy) >= 18
    assert sum(j.pairs for j in noisy) / 20 > 4
    assert sum(j.low <= 0.10 <= j.high for j in noisy) >= 17   # the interval holds the effect
    capped = judge(pairs(0.10, 0.5, 5), True, 0.05, 5)      # too noisy for 5 pairs
    assert capped.verdict == UNCLEAR and capped.pairs == 5


def test_a_step_refuses_a_threshold_of_nothing_and_a_reference_of_zero_is_unclear():
    with pytest.raises(ValueError, match="positive"):
        judge([(1.0, 1.0)] * 3, True, 0.0, 5)
    zero = judge([(0.0, 1.0)] * 3, True, 0.05, 5)
    assert zero.verdict == UNCLEAR and math.isnan(zero.effect)
    assert zero.as_dict()["effect"] is None and judge([], True, 0.05, 5).verdict is None
    assert judge([(100.0, 90.0)] * 4, True, 0.05, 9).describe() == (
        "+10.0% (95 % CI +10.0% to +10.0%, 4 pairs)")


# --- the record, replayed by git

def _repo(path, count):
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@lab", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@lab"}

    def git(*args, check=True):
        return subprocess.run(["git", "-C", str(path), *args], env=env, check=check,
                              capture_output=True, text=True).stdout
    git("init", "-q")
    for i in range(count):
        (path / "build").write_text(f"{i}\n")
        git("add", "build")
        git("commit", "-q", "-m", f"build {i}")
    return git, git("rev-list", "--reverse", "HEAD").split()


@pytest.mark.parametrize("skipped", [set(), {8}, {10}])
def test_git_bisect_replay_reads_the_record_and_finds_the_same_first_bad_commit(tmp_path, skipped):
    git, revs = _repo(tmp_path, 18)               # the good build, then 17 after it
    good, builds = Build(revs[0], "build 0"), [Build(r, f"build {i}") for i, r in enumerate(revs[1:], 1)]
    steps, found = search(17, slowdown_from(10, skipped))
    record = render(good, builds, [Step(b, v, "+10.0% (95 % CI ...)" if v == BAD else "")
                                   for b, v in steps], found)
    (tmp_path / "record").write_text(record)
    replayed = git("bisect", "replay", str(tmp_path / "record"), check=False)   # git exits 2
    #                                                      when only skipped commits are left
    if found.kind == BisectionAnswer.culprit:
        assert f"{revs[11]} is the first bad commit" in replayed
        assert record.endswith(f"# first bad commit: [{revs[11]}] build 11\n")
    else:
        assert "could be any of" in replayed
        assert all(revs[i + 1] in replayed for i in found.suspects)
        assert record.count("# possible first bad commit:") == len(found.suspects)


def test_the_record_of_no_change_says_so_and_keeps_git_out_of_a_contradiction():
    builds = [Build(f"r{i}") for i in range(17)]
    steps, found = search(17, lambda i: GOOD)
    record = render(Build("r-good"), builds, [Step(b, v) for b, v in steps], found)
    assert "git bisect good r16" not in record and "# good: [r16]" in record
    assert record.splitlines()[-1] == "# no change in the range: every build up to [r16] measured good"


def test_a_build_is_one_word_and_its_label_one_line():
    for revision in ("", "a b", "a\nb", "a\x1b[2J"):
        with pytest.raises(ValueError, match="one word"):
            Build(revision)
    assert Build("abc", "fix\ngit bisect reset").named() == "[abc] fix git bisect reset"
    record = render(Build("g"), [Build("b")], [Step(0, BAD, "x\ngit bisect reset")],
                    answer(1, {0: BAD}))
    assert "\ngit bisect reset" not in record and record.endswith("# first bad commit: [b]\n")
