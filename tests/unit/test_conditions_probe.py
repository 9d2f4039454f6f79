"""The conditions probe (core.readings.conditions): the wrapper run by real shells (busybox sh
and dash) on a sysfs-shaped tree gives the suite's own output back unchanged with its exit code
and the snapshots around it; the sampler stays bounded and ends with its shell; the parser never
raises on what a board may print and reads back what the probe writes; the envelope's verdict."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from benchfarm.api.conditions import CpuPolicy, Envelope, Snapshot, StepConditions, ThermalZone
from benchfarm.api.devicetype import ConditionsSource
from benchfarm.api.runs import SuiteSpec, TestPlanSpec
from benchfarm.core import steps
from benchfarm.core.readings import conditions as c
from benchfarm.core.readings.envelope import before_problems, judge

SHELLS = [s for s in ("busybox sh", "dash") if shutil.which(s.split()[0])]


def tree(root: Path, khz: int = 1000000, temp: int = 45000, trans: int = 3) -> Path:
    policy = root / "devices/system/cpu/cpufreq/policy0"
    zone, cool = root / "class/thermal/thermal_zone0", root / "class/thermal/cooling_device0"
    for d in (policy, zone, cool / "stats"):
        d.mkdir(parents=True, exist_ok=True)
    for path, value in ((policy / "scaling_cur_freq", khz), (policy / "scaling_min_freq", 600000),
                        (policy / "scaling_max_freq", 1000000),
                        (policy / "scaling_governor", "performance"), (zone / "type", "cpu"),
                        (zone / "temp", temp), (cool / "cur_state", 0),
                        (cool / "stats/total_trans", trans)):
        path.write_text(f"{value}\n")
    return root


def shell_text(stdout: str) -> str:
    """What labgrid gives of a command's output: its last line break dropped."""
    return stdout[:-1] if stdout.endswith("\n") else stdout


def run(shell: str, script: str, timeout: float = 30) -> tuple[str, int, float, float]:
    sent = time.time()
    p = subprocess.run([*shell.split(), "-c", script], capture_output=True, text=True,
                       timeout=timeout)
    return shell_text(p.stdout), p.returncode, sent, time.time()


@pytest.fixture
def installed():
    """Installs a source's probe as a session does (each command in a shell of its own); the
    scripts are removed after the test."""
    paths = []

    def install(shell: str, source: ConditionsSource) -> ConditionsSource:
        command = c.install(source)
        assert max(len(line) for line in shlex.quote(command).splitlines()) <= c.CONSOLE_LINE
        assert run(shell, command)[1] == 0
        paths.append(Path(c.script_path(source)))
        assert paths[-1].exists()
        return source
    yield install
    for path in paths:
        path.unlink(missing_ok=True)


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("command", [
    "echo a; echo b", "printf x", "printf 'x\\n\\n'", "true", "echo out; exit 3 # a comment",
    "printf '@bfs|up=1|@end\\n'", "for i in 1 2; do echo $i; done; (exit 7)", "echo '|' \"$1\""])
def test_the_suite_gets_its_own_output_and_exit_code_back(tmp_path, shell, command, installed):
    source = installed(shell, ConditionsSource(root=str(tree(tmp_path)), intervalSeconds=0.2,
                                               throttleCommand="echo firmware 5; echo junk"))
    plain, plain_code, _, _ = run(shell, command)
    script, markers = c.wrap(command, source)
    text, code, sent, returned = run(shell, script)
    got = c.unwrap(text, markers, sent, returned)
    assert (got.output, code) == (plain, plain_code)
    assert got.before is not None and got.after is not None
    assert sent - 0.001 <= got.before.t <= got.after.t <= returned + 0.001   # ms rounded
    assert got.before.cpufreq["policy0"] == CpuPolicy(curKHz=1000000, minKHz=600000,
                                                      maxKHz=1000000, governor="performance")
    assert got.before.thermal["thermal_zone0"] == ThermalZone(type="cpu", tempC=45.0)
    assert got.before.throttle == {"cooling_device0": 3, "firmware": 5}
    assert got.before.cooling == {"cooling_device0": 0}
    assert got.before.memAvailableKiB and got.before.load1 is not None
    assert got.last is not None


@pytest.mark.parametrize("shell", SHELLS)
def test_the_sampler_samples_during_the_step_on_the_host_clock(tmp_path, shell, installed):
    source = installed(shell, ConditionsSource(root=str(tree(tmp_path)), intervalSeconds=0.2))
    script, markers = c.wrap(f"sleep 1; echo 550000 > {tmp_path}/devices/system/cpu/cpufreq/"
                             "policy0/scaling_cur_freq; sleep 0.6", source)
    text, code, sent, returned = run(shell, script)
    got = c.unwrap(text, markers, sent, returned)
    assert code == 0 and 4 <= len(got.during) <= 9
    times = [got.before.t, *[s.t for s in got.during], got.after.t]
    assert times == sorted(times)
    reasons = judge(Envelope(minFrequencyMHz=1000), StepConditions(
        before=got.before, during=got.during, after=got.after))
    assert len(reasons) == 1 and reasons[0].startswith("policy0 at 550 MHz, below the "
                                                       "envelope's 1000 MHz (during, ")
    assert reasons[0].endswith(f" of {len(got.during)} samples; after)")


@pytest.mark.parametrize("shell", SHELLS[:1])
def test_the_sampler_keeps_at_most_twice_max_during_and_the_host_thins_them(
        tmp_path, shell, monkeypatch, installed):
    monkeypatch.setattr(c, "MAX_DURING", 3)
    source = installed(shell, ConditionsSource(root=str(tree(tmp_path)), intervalSeconds=0.2))
    script, markers = c.wrap("sleep 3", source)
    text, _, sent, returned = run(shell, script)
    lines = text.split(markers.line("during"))[1].splitlines()
    assert 2 <= len([ln for ln in lines if ln.startswith(c.LINE)]) < 6   # halved at 6
    got = c.unwrap(text, markers, sent, returned)
    assert 2 <= len(got.during) <= 3


@pytest.mark.parametrize("shell", SHELLS[:1])
def test_the_sampler_ends_by_itself_when_its_shell_is_gone(tmp_path, shell, installed):
    source = installed(shell, ConditionsSource(root=str(tree(tmp_path)), intervalSeconds=0.2))
    script, _ = c.wrap("sleep 3", source, nonce="deadbeef0001")
    p = subprocess.Popen([*shell.split(), "-c", script], stdout=subprocess.DEVNULL)
    samples = Path(c.SAMPLES)
    time.sleep(0.7)
    assert samples.read_text().count(c.LINE) >= 2
    p.kill()                       # a timed-out suite's shell, interrupted
    p.wait()
    time.sleep(0.5)                # its sampler's next look finds it gone, and ends
    taken = samples.read_text()
    time.sleep(0.8)
    assert samples.read_text() == taken                       # no sampler writes any more


@pytest.mark.parametrize("shell", SHELLS[:1])
def test_without_the_probe_on_the_board_the_suite_runs_as_it_is(tmp_path, shell):
    source = ConditionsSource(root=str(tmp_path / "nothing-installed"))
    script, markers = c.wrap("echo plain; exit 4", source)
    text, code, sent, returned = run(shell, script)
    got = c.unwrap(text, markers, sent, returned)
    assert (got.output, code, got.before) == ("plain", 4, None)
    snap, _ = c.read_probe(run(shell, c.probe(source))[0], sent, returned)
    assert snap is None


def test_a_timed_out_suite_keeps_its_output_and_the_before_snapshot():
    m = c.Markers("n1")
    text = f"{m.line('before')}\n@bfs|up=10.0|@end\n{m.line('out')}\nhalf of it"
    got = c.unwrap(text, m, 100.0, 130.0)
    assert got.output == "half of it" and got.before is not None and got.after is None
    assert got.before.t == 100.0 + (130.0 - 100.0) / 2       # one uptime: the middle


def test_without_the_wrapper_output_the_text_is_the_suites():
    assert c.unwrap("sh: syntax error", c.Markers("n"), 0, 1).output == "sh: syntax error"


def test_board_uptime_is_mapped_into_the_send_and_return_times():
    m = c.Markers("n")
    stat = "cpu 100 0 100 800 0 0 0 0"
    later = "cpu 150 0 150 900 0 0 0 0"                      # 100 busy of 200
    text = (f"{m.line('before')}\n@bfs|up=50.0|stat={stat}|@end\n{m.line('out')}\nok\n\n"
            f"{m.line('after')}\n@bfs|up=60.0|stat={later}|@end\n{m.line('during')}\n"
            f"@bfs|up=55.0|stat=cpu 120 0 120 850 0 0 0 0|@end\n@bfs|up=99.0|@end\n"
            f"@bfs|up=56.0|cut\n{m.line('end')}")
    got = c.unwrap(text, m, 1000.0, 1010.5, c.Mark(40.0, (90, 0, 90, 700, 0, 0, 0, 0)))
    assert got.output == "ok"
    assert [got.before.t, got.during[0].t, got.after.t] == [1000.25, 1005.25, 1010.25]
    assert len(got.during) == 1                        # the stale and the cut line dropped
    assert got.before.busy == 0.1667 and got.after.busy == pytest.approx(0.5, abs=0.1)
    assert got.last == c.Mark(60.0, (150, 0, 150, 900, 0, 0, 0, 0))


def test_busy_from_proc_stat_deltas():
    assert c.busy((0, 0, 0, 0), (10, 0, 10, 80)) == 0.2
    assert c.busy((0, 0, 0, 0, 0), (0, 0, 0, 50, 50)) == 0.0     # iowait is idle
    assert c.busy((5, 0, 0, 0), (4, 0, 0, 10)) is None          # counters went back
    assert c.busy((0, 0, 0, 0), (0, 0, 0, 0)) is None


names = st.text(st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="|=."),
                min_size=1, max_size=12)
snapshots = st.builds(
    dict,
    up=st.floats(0, 1e7, allow_nan=False).map(lambda f: round(f, 2)),
    cpufreq=st.dictionaries(names, st.tuples(st.integers(0, 5_000_000), names), max_size=4),
    thermal=st.dictionaries(names, st.tuples(names, st.integers(-40_000, 150_000)), max_size=4),
    throttle=st.dictionaries(names, st.integers(0, 10**9), max_size=4),
    mem=st.integers(0, 10**9), load=st.floats(0, 100).map(lambda f: round(f, 2)))


def line_of(s: dict) -> str:
    """A snapshot line as bfc_snap prints it."""
    parts = [f"up={s['up']}", "stat=cpu  1 2 3 4 5 6 7 8 0 0", f"load={s['load']}",
             f"mem={s['mem']}"]
    for n, (khz, gov) in s["cpufreq"].items():
        parts += [f"p.{n}.scaling_cur_freq={khz}", f"p.{n}.scaling_governor={gov}"]
    for n, (kind, milli) in s["thermal"].items():
        parts += [f"t.{n}.type={kind}", f"t.{n}.temp={milli}"]
    parts += [f"x.{n}={v}" for n, v in s["throttle"].items()]
    return "@bfs|" + "|".join(parts) + "|@end"


@given(snapshots)
def test_a_snapshot_line_reads_back_what_it_says(s):
    raw = c.parse_line(line_of(s))
    assert raw is not None and raw.uptime == s["up"] and raw.stat == (1, 2, 3, 4, 5, 6, 7, 8)
    snap = Snapshot(t=0, **raw.fields)
    assert {n: (p.curKHz, p.governor) for n, p in snap.cpufreq.items()} == s["cpufreq"]
    assert {n: (z.type, z.tempC) for n, z in snap.thermal.items()} == {
        n: (k, round(m / 1000, 1)) for n, (k, m) in s["thermal"].items()}
    assert snap.throttle == s["throttle"] and snap.memAvailableKiB == s["mem"]
    assert snap.load1 == s["load"]


board_text = st.lists(st.one_of(
    st.text(max_size=80), st.sampled_from(["@bfs|up=1|@end", "@bfs|up=x|stat=cpu a|@end",
                                           "@bfs|p.a.scaling_cur_freq=9" + "9" * 40 + "|@end",
                                           "@@bfc-n-before@@", "@@bfc-n-out@@",
                                           "@@bfc-n-after@@", "@@bfc-n-during@@",
                                           "@bfs|t.z.temp=1e400|@end", "@bfs|up=-1|@end"])),
    max_size=40).map("\n".join)


@settings(max_examples=300)
@given(board_text, st.floats(0, 1e10), st.floats(0, 100))
def test_whatever_the_board_prints_the_parser_never_raises_and_stays_bounded(text, sent, span):
    got = c.unwrap(text, c.Markers("n"), sent, sent + span)
    assert len(got.output) <= len(text) and len(got.during) <= c.MAX_DURING
    for snap in [got.before, got.after, *got.during]:
        assert snap is None or len(snap.cpufreq) <= c.MAX_ENTRIES


def test_a_long_line_is_no_snapshot_and_parsing_is_linear():
    assert c.parse_line("@bfs|" + "x" * (c.MAX_LINE + 1) + "|@end") is None
    big = "\n".join(["@bfs|up=1|" + "p.a.b=1|" * 200 + "@end"] * 5000)
    start = time.process_time()
    c.unwrap(big, c.Markers("n"), 0, 1)
    c.read_probe(big, 0, 1)
    assert time.process_time() - start < 2


def snap(t: float, khz: int = 1_000_000, temp: float = 50.0, gov: str = "performance",
         trans: int = 0, busy: float | None = None) -> Snapshot:
    return Snapshot(t=t, cpufreq={"policy0": CpuPolicy(curKHz=khz, governor=gov)},
                    thermal={"thermal_zone0": ThermalZone(type="cpu", tempC=temp)},
                    throttle={"cooling_device0": trans}, busy=busy)


ENVELOPE = Envelope(governor="performance", minFrequencyMHz=1000, maxTemperatureC=85,
                    maxBusyBefore=0.5, allowThrottling=False)


def test_the_envelope_names_each_bound_a_step_left():
    during = [snap(1), snap(2, khz=600_000), snap(3, khz=600_000, temp=91.0, trans=1),
              snap(4, khz=600_000, trans=2), snap(5), snap(6)]
    conditions = StepConditions(before=snap(0, gov="powersave", busy=0.62), during=during,
                                after=snap(7, trans=2))
    assert judge(ENVELOPE, conditions) == [
        "policy0 governor powersave, not performance (before)",
        "policy0 at 600 MHz, below the envelope's 1000 MHz (during, 3 of 6 samples)",
        "thermal_zone0 at 91.0 °C, over 85 °C (during, 1 of 6 samples)",
        "throttled: cooling_device0 counted 2 events during the step",
        "62 % busy before the start, over 50 %"]
    assert judge(ENVELOPE, StepConditions(before=snap(0, busy=0.1), during=[snap(1)],
                                            after=snap(2))) == []
    assert judge(Envelope(waitSeconds=5), conditions) == []          # bounds nothing
    assert judge(ENVELOPE.model_copy(update={"allowThrottling": None}), StepConditions(
        before=snap(0), after=snap(1, trans=4))) == []
    assert judge(ENVELOPE, StepConditions())[0].startswith("no snapshot")
    assert before_problems(ENVELOPE, snap(0, temp=90.0, trans=9)) == [
        "thermal_zone0 at 90.0 °C, over 85 °C (before)"]


def test_a_plans_envelope_is_tightened_by_each_suites_at_resolution():
    plan = TestPlanSpec(envelope=Envelope(maxTemperatureC=80, retakes=1), suites=[
        SuiteSpec(name="a", suite="shell", command="x"),
        SuiteSpec(name="b", suite="shell", command="x",
                  envelope=Envelope(maxTemperatureC=70, minFrequencyMHz=900))])
    a, b = plan.resolved()
    assert a.envelope == Envelope(maxTemperatureC=80, retakes=1)
    assert b.envelope == Envelope(maxTemperatureC=70, minFrequencyMHz=900, retakes=1)
    assert TestPlanSpec(suites=plan.suites).resolved()[0].envelope is None


def test_a_retake_has_a_raw_key_of_its_own():
    assert steps.raw_key("p", "s", 2) == "p/raw/s/iteration-002.txt"
    assert steps.raw_key("p", "s", 2, "b", retake=1) == "p/raw/s/b/iteration-002-retake-1.txt"


def test_the_longest_root_and_throttle_command_a_device_type_takes_fit_a_console_line():
    source = ConditionsSource(root="/" + "r" * 255, throttleCommand="echo " + "x" * 507)
    command = c.install(source)
    assert max(len(line) for line in shlex.quote(command).splitlines()) <= c.CONSOLE_LINE
