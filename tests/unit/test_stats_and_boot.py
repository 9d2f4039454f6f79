"""Statistics in the seed format, result summaries, and boot timing from a serial stream."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

from benchfarm.core.readings.boot import BootWatcher, timeline_from_chunks
from benchfarm.core.statistics.results import SuiteRecord, series, summary
from benchfarm.core.statistics.stats import seed_format, summarize
from benchfarm.suites.base import Metric


def test_seed_format_mean_min_max():
    assert seed_format([707.87, 785.15 * 3 - 707.87 - 861.19, 861.19]) == "785.15 (min 707.87, max 861.19)"


def test_seed_format_plain_number_when_all_agree():
    assert seed_format([57, 57, 57]) == "57"
    assert seed_format([2.5, 2.5]) == "2.50"


def test_summarize():
    s = summarize([1, 2, 3, 4])
    assert (s.n, s.mean, s.median, s.min, s.max) == (4, 2.5, 2.5, 1, 4)
    assert s.stddev == pytest.approx(1.2909944)
    with pytest.raises(ValueError):
        summarize([])


def test_warmup_iterations_are_left_out():
    recs = [SuiteRecord("c", "cyclictest", i, i == 1, 0, 1.0,
                        [Metric("cyclictest-max", v, "us", False)]) for i, v in [(1, 999), (2, 10), (3, 20)]]
    (s,) = series(recs)
    assert s.values == [10, 20]
    out = summary([{"kernel-to-prompt": 2.0}, {"kernel-to-prompt": 3.0}], "kernel-to-prompt",
                  recs, [("c", "cyclictest")])
    assert out["boot"]["display"] == "2.50 (min 2.00, max 3.00)"
    assert out["suites"]["c"]["value"] == "15.00 (min 10.00, max 20.00)"


def test_boot_watcher_dates_markers_by_the_chunk_that_completes_them():
    chunks = [(10.5, b"SeaBIOS\r\n"), (11.0, b"[ 0.0] Linux ver"), (11.2, b"sion 6.1\r\n"),
              (13.0, b"Run /init as init process\r\n"), (13.4, b"root@vb:~# ")]
    tl = timeline_from_chunks(10.0, chunks, {"kernel": "Linux version", "init": "Run /init"},
                              r"root@\S+:\S*# ")
    assert tl.events == {"power-on": 0.0, "first-byte": 0.5, "kernel": 1.2, "init": 3.0,
                         "prompt": 3.4}
    assert tl.phases({"kernel-to-prompt": ("kernel", "prompt")}) == {"kernel-to-prompt": 2.2}


def test_prompt_before_init_does_not_count():
    tl = timeline_from_chunks(0.0, [(1.0, b"root@vb:~# "), (2.0, b"Run /init\n")],
                              {"init": "Run /init"}, r"root@\S+:\S*# ")
    assert tl.events["prompt"] == 2.0  # only once init was seen


def test_boot_failure_pattern_stops_the_wait():
    w = BootWatcher(0.0, {"kernel": "Linux version"}, "# ", ["Kernel panic - not syncing"])
    w.feed(1.0, b"Linux version 6.1\n")
    w.feed(2.0, b"[ 1.9] Kernel panic - not syncing: No working init found.\n")
    assert w.done and "No working init" in w.failure


@pytest.mark.parametrize("chunk", [1, 4, 1000])
def test_a_prompt_split_by_a_kernel_line_is_the_prompt(chunk):
    """The kernel prints its log between any two bytes of the shell's: a prompt cut in two by
    "link becomes ready" is reached when its second half comes, not a boot that never ended."""
    log = (b"[    0.000000] Linux version 6.1\r\n[    0.500000] Run /init as init process\r\n"
           b"root@vb-[    4.470480] IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready\r\n"
           b"x86-0:~# ")
    w = BootWatcher(0.0, {"kernel": "Linux version", "init": "Run /init"}, r"root@\S+:\S*# ")
    for i in range(0, len(log), chunk):
        assert not w.done
        w.feed(1.0 + i / 1000, log[i:i + chunk])
    assert w.done and w.failure is None and "prompt" in w.timeline.events


def test_kernel_stamps_fuse_with_the_host_clock_by_their_lower_envelope():
    # The kernel starts 0.300 s after power-on; it holds its first lines until its console is up
    # (they arrive together at 0.551 s); later lines arrive 1-3 ms after they were printed.
    chunks = [(10.551, b"[    0.000000] Linux version 6.1\r\n[    0.100000] a\r\n[    0.200000] b\r\n"),
              (10.701, b"[    0.400000] c\r\n"),
              (11.203, b"[    0.900000] Run /init as init process\r\n"),
              (11.500, b"root@vb:~# ")]
    tl = timeline_from_chunks(10.0, chunks, {"kernel": "Linux version", "init": "Run /init"},
                              r"root@\S+:\S*# ")
    assert tl.events["kernel"] == 0.551 and tl.events["init"] == 1.203      # the host's view
    clock = tl.kernel
    assert clock is not None and clock.lines == 4
    assert clock.offset == pytest.approx(0.301)
    assert tl.fused["kernel"] == pytest.approx(0.301) and tl.fused["init"] == pytest.approx(1.201)
    assert tl.fused["prompt"] == 1.5                                       # no stamp: host clock
    assert tl.phases({"kernel-to-prompt": ("kernel", "prompt")}) == {"kernel-to-prompt": 1.199}
    # the two lines printed before the first one arrived were held: counted, not measured
    assert clock.held == 2 and (clock.median_ms, clock.p95_ms) == (2.0, 2.0)


def test_an_event_is_never_dated_after_the_host_saw_it():
    # arm64: the banner (stamped 0.000000) goes out at 6.10 s; the kernel's clock starts later,
    # its zero at 6.17 s by the lower envelope of the stamped lines
    chunks = [(6.10, b"[    0.000000] Linux version 6.1\r\n"),
              (6.27, b"[    0.100000] a\r\n"), (7.00, b"[    0.800000] Run /init as init\r\n"),
              (7.50, b"root@vb:~# ")]
    tl = timeline_from_chunks(0.0, chunks, {"kernel": "Linux version", "init": "Run /init"},
                              r"root@\S+:\S*# ")
    assert tl.kernel is not None and tl.kernel.offset == pytest.approx(6.17)
    assert tl.fused["kernel"] == 6.10 and tl.fused["init"] == pytest.approx(6.97)


def test_no_usable_stamps_leaves_the_host_clock_alone():
    tl = timeline_from_chunks(0.0, [(1.0, b"[    0.000000] Linux version\n"), (2.0, b"# ")],
                              {"kernel": "Linux version"}, "# ")
    assert tl.kernel is None and tl.fused == tl.events


def test_byte_at_a_time_finds_what_whole_chunks_find():
    log = (b"SeaBIOS\r\n[    0.000000] Linux version 6.1 \xe2\x80\x94 test\r\n"
           b"[    0.500000] Run /init as init process\r\nroot@vb:~# ")
    markers, prompt = {"kernel": "Linux version 6.1 \u2014", "init": "Run /init"}, r"root@\S+:\S*# "
    whole = BootWatcher(0.0, markers, prompt)
    whole.feed(1.0, log)
    single = BootWatcher(0.0, markers, prompt)
    for i in range(len(log)):          # what a socket console read one byte per call produced
        single.feed(1.0, log[i:i + 1])
    assert single.timeline.events == whole.timeline.events
    assert set(whole.timeline.events) == {"power-on", "first-byte", "kernel", "init", "prompt"}
    assert single.pairs == whole.pairs and single.stamped == whole.stamped == {
        "kernel": (0.0, 0), "init": (0.5, 0)}


def test_a_line_that_never_ends_keeps_the_watch_small():
    w = BootWatcher(0.0, {"kernel": "Linux version"}, "# ")
    for i in range(1000):
        w.feed(i / 1000, bytes([65 + i % 26]) * 1000)      # 1 MB of noise, no newline
    assert len(w._line) <= 4096
    w.feed(2.0, b"\r\nLinux version 6.1\r\n")
    assert w.timeline.events["kernel"] == 2.0


def test_a_kernel_clock_that_runs_slow_is_fitted_with_its_rate():
    # the shape measured on vb-x86-1 (TCG): the kernel's zero 0.754 s after power-on, its clock
    # 0.66 % slow against the host's; a burst held until the console was up, bursts that queue
    # behind a slow console, and lines after pauses that arrive within a millisecond
    import random
    rng = random.Random(7)
    offset, rate = 0.754, 1.0066
    pairs, k = [], 0.004
    while k < 0.3:                                  # held: all arrive once the console is up
        pairs.append((1.10 + len(pairs) * 0.0004, k))
        k += 0.01
    while k < 6.0:
        burst = rng.random() < 0.2
        for j in range(8 if burst else 1):                  # a burst queues: 3 ms a line
            pairs.append((offset + rate * k + j * 0.003 + rng.uniform(0, 0.001), k))
            k += 0.0005
        k += rng.uniform(0.02, 0.2)
    clock = kernel_clock_of(pairs)
    assert clock.rate == pytest.approx(rate, abs=0.0005)
    assert clock.offset == pytest.approx(offset, abs=0.002)
    assert clock.quiet_lines > 20 and clock.quiet_median_ms < 1.0 and clock.quiet_p95_ms < 1.5
    assert 30 <= clock.held <= 31     # the burst from before the console was up (30 lines)
    assert clock.p95_ms > 15          # over the live lines: the queueing, reported as such
    ignoring_rate = min(h - k for h, k in pairs if k > 0.3)
    assert max(h - (ignoring_rate + k) for h, k in pairs if k > 5.5) > 0.030   # 0.66 % of 5 s


def test_too_few_stamped_lines_for_a_rate_keep_rate_one():
    clock = kernel_clock_of([(1.0, 0.1), (1.5, 0.55), (2.0, 1.1)])
    assert clock.rate == 1.0 and clock.offset == pytest.approx(0.9)


def test_a_rate_beyond_any_real_clock_falls_back_to_the_envelope():
    # a log replayed at once after 2 s of kernel time: no clock runs 3x slow
    pairs = [(3.0 + i * 0.001, 0.1 * i) for i in range(1, 40)]
    clock = kernel_clock_of(pairs)
    assert clock.rate == 1.0 and clock.offset == pytest.approx(min(h - k for h, k in pairs))


def kernel_clock_of(pairs):
    from benchfarm.core.readings.boot import kernel_clock
    clock = kernel_clock(pairs, {})
    assert clock is not None
    return clock


def test_a_stamped_line_is_dated_by_its_first_byte():
    # 100 characters at 115200 baud: the stamp arrives 8.7 ms before the newline
    w = BootWatcher(0.0, {}, "# ")
    w.feed(1.0000, b"[    0.500000] " + b"x" * 40)
    w.feed(1.0087, b"y" * 45 + b"\r\n[    0.600000] z\r\n")
    assert w.pairs == [(1.0, 0.5), (1.0087, 0.6)]


def test_a_kernel_clock_that_starts_over_is_placed_by_its_last_epoch():
    # measured on vb-x86-0 under load: "tsc: Fast TSC calibration failed", the early lines are
    # stamped by jiffies (0.000000, then 0.036000), then the TSC clock starts from a new zero
    log = [(0.90, "[    0.000000] Linux version 6.1"), (0.91, "[    0.000000] tsc: Fast TSC "
           "calibration failed"), (0.92, "[    0.036000] tsc: using HPET reference calibration"),
           (0.93, "[    0.036000] console up")]
    zero = 0.95                                   # the new epoch's zero, 0.95 s after power-on
    k = 0.000816
    while k < 1.6:
        log.append((zero + k + 0.0005, f"[{k:12.6f}] line"))
        k += 0.05
    log.append((zero + 1.7 + 0.0005, "[    1.700000] Run /init as init process"))
    w = BootWatcher(0.0, {"kernel": "Linux version", "console": "console up", "init": "Run /init"},
                    "# ")
    for when, line in log:
        w.feed(when, (line + "\r\n").encode())
    w.feed(2.8, b"# ")
    tl = w.finish()
    clock = tl.kernel
    assert clock is not None and clock.restarts == 1
    assert clock.offset == pytest.approx(zero, abs=0.001) and clock.rate == pytest.approx(1.0, abs=1e-3)
    assert clock.median_ms < 1.0              # not the 36 ms of the old epoch
    assert tl.fused["init"] == pytest.approx(zero + 1.7, abs=0.001)
    assert tl.fused["console"] == 0.93            # stamped in the old epoch: the host's time


def test_small_figures_keep_their_significant_digits():
    """Issue 42: hackbench's 0.1217 s once showed as "0.12 (min 0.12, max 0.12)"."""
    from benchfarm.core.statistics.regression import Sample
    from benchfarm.core.statistics.stats import figure
    assert seed_format([0.1203, 0.1217, 0.1231]) == "0.122 (min 0.120, max 0.123)"
    assert figure(0.122, 0.121, 0.123) == "0.122 (min 0.121, max 0.123)"
    assert Sample.summary(0.122, 0.121, 0.123).display == "0.122 (min 0.121, max 0.123)"
    assert seed_format([0.003081, 0.003081]) == "0.00308"
    assert figure(0.0031, 0.003, 0.0032) == "0.00310 (min 0.00300, max 0.00320)"
    # values that differ never print alike: more decimals until they do not
    assert seed_format([12.3401, 12.3402, 12.3403]) == "12.3402 (min 12.3401, max 12.3403)"
    # the guides' own format where two decimals keep the figures
    assert figure(785.15, 707.87, 861.19) == "785.15 (min 707.87, max 861.19)"
    assert figure(0.75, 0.75, 0.75) == "0.75" and figure(-0.5, -0.5, -0.5) == "-0.50"


def test_a_console_silent_past_its_stages_limit_is_a_hung_boot():
    """Issue 42: a boot that hangs silently mid-way is decided in seconds, not at the timeout."""
    from benchfarm.core.readings.boot import BootWatcher
    w = BootWatcher(100.0, {"kernel": "Linux version", "init": "Run /init"}, r"# $",
                    silence_s=12, silence_after={"init": 30})
    assert w.hung(500.0) is None                   # before the first byte: SerialSilent's to judge
    w.feed(101.0, b"SeaBIOS\n")
    w.feed(102.0, b"Linux version 6.1\n")
    assert w.hung(113.9) is None                   # 11.9 s silent: within the limit
    assert w.hung(114.5) == 12.5                   # past it: hung, and for how long
    w.feed(115.0, b"Run /init as init process\n")
    assert w.silence_limit() == 30 and w.hung(140.0) is None   # the stage's own limit from init
    assert w.hung(146.0) == 31.0
    w.feed(146.5, b"# ")
    assert w.done and w.hung(1000.0) is None       # at the prompt nothing is hung
    assert BootWatcher(0.0, {}, "# $").hung(1e9) is None    # no limit, no verdict


def test_device_types_state_their_silence_limits():
    from benchfarm.api.devicetype import BootSpec
    assert BootSpec().silenceSeconds is None
    assert BootSpec(silenceSeconds=12, silenceAfterSeconds={"init": 30}).silenceAfterSeconds == {"init": 30}
    with pytest.raises(ValueError):
        BootSpec(silenceSeconds=0)


EXTREMES = [1e308, -1e308, 1.7976931348623157e308, -1.7976931348623157e308, 5e-324, 0.0, 1.0]


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.lists(st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                          st.sampled_from(EXTREMES)), min_size=1, max_size=40))
def test_summarize_any_finite_figures_near_the_floats_limit_too(values):
    """No sum overflows: the mean and median lie between min and max, finite; the spread is
    never negative or NaN (inf only where the true one is past the largest float); the figure
    is written."""
    s = summarize(values)
    assert s.n == len(values) and (s.min, s.max) == (min(values), max(values))
    for x in (s.mean, s.median):
        assert math.isfinite(x) and s.min <= x <= s.max, (x, s)
    exact = sum(Fraction(v) for v in values) / len(values)
    error = abs(Fraction(s.mean) - exact)
    assert error <= Fraction(max(map(abs, values))) / 10**12 + Fraction(1, 10**300), s
    assert s.stddev >= 0 and not math.isnan(s.stddev)
    assert seed_format(values)


def test_summarize_huge_equal_values_and_non_finite_ones():
    assert summarize([1e308, 1e308]).mean == 1e308                       # fsum overflowed
    assert summarize([1e308, 1.5e308]).median == 1.25e308                # (a + b) / 2 did
    assert summarize([-1.7976931348623157e308, 1.7976931348623157e308]).stddev == math.inf
    s = summarize([math.inf, 1.0])
    assert s.mean == math.inf and math.isnan(s.stddev)
    assert math.isnan(summarize([math.inf, -math.inf]).mean)
