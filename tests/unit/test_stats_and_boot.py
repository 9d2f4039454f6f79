"""Statistics in the seed format, result summaries, and boot timing from a serial stream."""

from __future__ import annotations

import pytest

from benchfarm.core.boot import BootWatcher, timeline_from_chunks
from benchfarm.core.results import SuiteRecord, series, summary
from benchfarm.core.stats import seed_format, summarize
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
    assert (clock.median_ms, clock.p95_ms) == (50.0, 150.0)   # the held lines arrived late


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
