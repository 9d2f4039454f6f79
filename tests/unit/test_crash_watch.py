"""The strategy's crash watch quotes a failure marker's whole line, however the reads cut it.

A tenant's `uname -a` printed a kernel-panic marker as its host name; the read that matched the
marker ended mid-line, and the fault (and so the run's condition) quoted half the build's name.
"""

from __future__ import annotations

import re

import pytest

from benchfarm.errors import BoardFault
from benchfarm.lab import strategy
from benchfarm.lab.strategy import BenchfarmStrategy, Status

LINE = "Linux Kernel panic - not syncing: team-b-build-44cfe0 6.1.0 #1 SMP aarch64 GNU/Linux"


def _watching() -> BenchfarmStrategy:
    """The crash watch's state alone: no labgrid target is needed to feed it console bytes."""
    s = object.__new__(BenchfarmStrategy)
    s.place, s.status = "vb-a53-0", Status.shell
    s._crash_patterns = [re.compile(r"Kernel panic - not syncing")]
    s._crash_carry, s._crash_line = "", None
    return s


def _feed(s: BenchfarmStrategy, *chunks: str) -> str:
    with pytest.raises(BoardFault) as caught:
        for chunk in chunks:
            s._crash_watch(chunk.encode())
    return str(caught.value)


@pytest.mark.parametrize("cut", [len("Linux Kernel panic - not syncing"), 40, 50, len(LINE)])
def test_a_marker_cut_by_a_read_is_quoted_whole_when_its_line_ends(cut):
    s = _watching()
    said = _feed(s, "$ uname -a\r\nMARK" + LINE[:cut], LINE[cut:] + "\r\nmore", "next")
    assert said.endswith("MARK" + LINE) and s.status == Status.unknown and s._crash_line is None


def test_a_marker_spanning_two_reads_is_found_and_quoted():
    s = _watching()
    assert _feed(s, "boot ok\r\nKernel pan", "ic - not syncing: x\r\n").endswith(
        "while a command ran: Kernel panic - not syncing: x")


def test_a_line_without_end_is_quoted_to_its_budget():
    s = _watching()
    said = _feed(s, "Kernel panic - not syncing: ", "y" * 1000)
    assert said.endswith("y" * (strategy.CRASH_LINE - len("Kernel panic - not syncing: ")))


def test_a_quiet_console_raises_with_the_part_that_came(monkeypatch):
    s = _watching()
    s._crash_watch(b"Kernel panic - not syncing: half")   # no newline: the rest is awaited
    assert s._crash_line is not None
    now = strategy.time.monotonic() + strategy.CRASH_LINE_WAIT + 1
    monkeypatch.setattr(strategy.time, "monotonic", lambda: now)
    with pytest.raises(BoardFault, match="not syncing: half$"):
        s._crash_end("", now)


def test_no_marker_no_fault():
    s = _watching()
    for chunk in ("Linux vb-a53-0 6.1.0 #1 SMP aarch64 GNU/Linux\r\n", "root@vb-a53-0:~# "):
        s._crash_watch(chunk.encode())
    assert s._crash_line is None and s.status == Status.shell
