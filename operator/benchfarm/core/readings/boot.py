"""Boot timing from a timestamped serial stream: when each marker first appeared after power-on.

Pure: the board session records (monotonic time, bytes) chunks as they arrive; this turns them into
the events of a boot (first byte, kernel start, init, prompt …) and the phases a device type names
(e.g. kernel-to-prompt, the headline figure of TI's guides).

Two clocks see a boot: the host's, when each chunk arrived (milliseconds, and late by however
long the kernel held its log before the console was up), and the kernel's printk stamps
(`[    1.234567]`, microseconds from kernel start). Lines carrying a stamp pair the two (the
host's time of the line's first byte); the kernel's clock is placed on the host's by the line
that no pair lies below (a line is never received before it is printed): its zero after
power-on and its rate (an emulated or miscalibrated timer runs a percent fast or slow, 30 ms
over a 3 s boot). Events on a stamped line are dated by that line, the others by the host;
phases come from that fused timeline, and how far after the fused time the host saw each line
(the disagreement) is reported with it: over all lines, and over the lines after a pause, where
no burst queued ahead of them and what remains is the two clocks' own disagreement.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from benchfarm.core.readings.capture import KERNEL_TEXT_LINES

POWER_ON = "power-on"
FIRST_BYTE = "first-byte"
PROMPT = "prompt"
_STAMP = re.compile(r"\r?\[\s*(\d+\.\d+)\]")
MAX_PAIRS = 4000        # stamped lines kept per boot (memory stays bounded)
MIN_RATE_PAIRS = 20     # a rate is fitted to at least this many stamped lines
MIN_RATE_SPAN_S = 1.0   # spanning at least this much kernel time
MAX_SKEW = 0.05        # a kernel clock off by more than 5 % is not a clock to fit a rate to
CLOCK_RESTART_S = 0.005  # a stamp this far below the one before: the clock started over
QUIET_S = 0.020         # a log pause after which a line reaches the host at once
MAX_LINE = 4096         # of a line without an end (serial noise), the tail is kept for matching


@dataclass
class KernelClock:
    """The kernel's printk clock placed on the host's: offset, rate and how well the two agree."""

    offset: float                      # seconds from power-on to the kernel's time zero
    rate: float                        # host seconds per kernel second (an emulated or
    #                                    miscalibrated timer runs fast or slow)
    events: dict[str, float]           # events on stamped lines, in seconds since power-on
    lines: int
    median_ms: float                   # host arrival minus fused time, over the live lines
    p95_ms: float
    quiet_lines: int = 0               # lines after a pause of the log, on both clocks
    quiet_median_ms: float | None = None
    quiet_p95_ms: float | None = None
    held: int = 0                      # lines printed before the first one reached the host
    restarts: int = 0                  # times the kernel's clock started over (the last counts)

    def as_dict(self) -> dict[str, object]:
        return {"offset": round(self.offset, 6), "rate": round(self.rate, 6),
                "events": self.events, "lines": self.lines, "held": self.held,
                "restarts": self.restarts,
                "disagreementMs": {"median": self.median_ms, "p95": self.p95_ms},
                "quiet": {"lines": self.quiet_lines, "medianMs": self.quiet_median_ms,
                          "p95Ms": self.quiet_p95_ms}}


def _lower_hull(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The lower convex hull of (kernel, host) points, by increasing kernel time."""
    hull: list[tuple[float, float]] = []
    for p in sorted(points):
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1) > 0:
                break
            hull.pop()
        hull.append(p)
    return hull


def fit_clock(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    """(offset, rate) of the line host = offset + rate * kernel that no pair lies below (a line
    is never received before it is printed) and that lies closest to them all: the lower hull's
    edge over the pairs' mean kernel time minimizes the sum of the lateness of every pair under
    that constraint (the linear programme of Moon, Skelly and Towsley, 1999, for clock skew from
    one-way delays). Too few pairs, or too short a stretch of kernel time, for a rate that
    means anything: rate 1. A rate further than MAX_SKEW from 1 says the pairs are not one clock's
    (a clocksource switch, a log replayed at once): then the rate is 1 and the offset their
    lower envelope."""
    by_kernel: dict[float, float] = {}
    for h, k in pairs:
        by_kernel[k] = min(h, by_kernel.get(k, h))
    hull = _lower_hull([(k, h) for k, h in by_kernel.items()])
    offset = min(h - k for h, k in pairs)
    if len(hull) < 2 or len(pairs) < MIN_RATE_PAIRS or hull[-1][0] - hull[0][0] < MIN_RATE_SPAN_S:
        return offset, 1.0
    mean_k = sum(k for _, k in pairs) / len(pairs)
    (k1, h1), (k2, h2) = next(((a, b) for a, b in zip(hull, hull[1:], strict=False)
                               if b[0] >= mean_k),
                              (hull[-2], hull[-1]))
    rate = (h2 - h1) / (k2 - k1)
    if abs(rate - 1.0) > MAX_SKEW:
        return offset, 1.0
    return h1 - rate * k1, rate


def _median_p95(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return (round(ordered[len(ordered) // 2], 3),
            round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))], 3))


def kernel_clock(pairs: list[tuple[float, float]], stamped: Mapping[str, float], *,
                 restarts: int = 0) -> KernelClock | None:
    """From (host seconds since power-on, printk seconds) pairs; None without usable stamps.
    Stamps of 0.000000 come before the kernel's clock runs and say nothing about it.

    The disagreement is host arrival minus fused time. Lines printed before the first stamped
    line reached the host were held (the kernel's log from before its console was up, replayed
    at once): they are counted, not measured. Over the other, live, lines it is mostly how long
    a line waited behind the ones before it (a console drains a burst slower than the kernel
    logs it). A line printed after a pause of the log
    (QUIET_S without a stamp) that also reached the host after a pause (at least half as long:
    not part of a replayed burst) had nothing ahead of it: there the disagreement is the two
    clocks' (and the console's own transit)."""
    usable = [(h, k) for h, k in pairs if k > 0]
    if not usable:
        return None
    offset, rate = fit_clock(usable)
    first = min(h for h, _ in usable)
    live = [(h, k) for h, k in usable if offset + rate * k >= first]
    late = [(h - (offset + rate * k)) * 1000 for h, k in live]
    quiet = [late[i] for i in range(1, len(live))
             if (pause := live[i][1] - live[i - 1][1]) >= QUIET_S
             and live[i][0] - live[i - 1][0] >= pause / 2]
    median, p95 = _median_p95(late) if late else (0.0, 0.0)
    q_median, q_p95 = _median_p95(quiet) if quiet else (None, None)
    return KernelClock(offset, rate, {name: round(offset + rate * k, 6)
                                      for name, k in stamped.items()},
                       len(usable), median, p95, len(quiet), q_median, q_p95,
                       held=len(usable) - len(live), restarts=restarts)


@dataclass
class BootTimeline:
    """Seconds since power-on for each event seen; phases are differences of two events."""

    events: dict[str, float] = field(default_factory=dict)     # by the host's clock
    kernel: KernelClock | None = None

    @property
    def fused(self) -> dict[str, float]:
        """Each event by the better-resolved clock that saw it: the kernel's where it stamped
        the line, the host's otherwise. Never later than the host saw it: a line stamped
        0.000000 precedes the kernel's clock, which may start after the line went out (arm64's
        timer registers a while after the banner), so its stamp dates the clock, not the line."""
        kernel = self.kernel.events if self.kernel else {}
        return {**self.events, **{name: min(t, self.events.get(name, t))
                                  for name, t in kernel.items()}}

    def phase(self, start: str, end: str) -> float | None:
        events = self.fused
        if start in events and end in events:
            return round(events[end] - events[start], 3)
        return None

    def phases(self, definitions: Mapping[str, tuple[str, str] | list[str]]) -> dict[str, float]:
        out = {}
        for name, (start, end) in definitions.items():
            value = self.phase(start, end)
            if value is not None:
                out[name] = value
        return out

    @property
    def reached_prompt(self) -> bool:
        return PROMPT in self.events


class BootWatcher:
    """Feed it serial chunks as they arrive; it notes when each marker first shows up.

    Markers may straddle chunk boundaries, so matching runs on the text accumulated so far; each
    match is dated by the chunk that completed it.
    """

    def __init__(self, power_on: float, markers: Mapping[str, str], prompt: str,
                 failures: Iterable[str] = (), silence_s: float | None = None,
                 silence_after: Mapping[str, float] | None = None) -> None:
        self.power_on = power_on
        # A console that has spoken, then stays silent this long before the prompt, is a hung
        # boot (`hung`): `silence_after` sets the limit from a marker on (the last one reached)
        self.silence_s = silence_s
        self.silence_after = dict(silence_after or {})
        self.last_byte: float | None = None            # when the last chunk was read
        self.failure_patterns = [re.compile(rx) for rx in failures]
        self.failure: str | None = None
        self.pending = {name: re.compile(rx) for name, rx in markers.items()}
        self.prompt = re.compile(prompt)
        self.timeline = BootTimeline({POWER_ON: 0.0})
        # (host, kernel) of stamped lines. A line is dated by the read that brought its first
        # byte (the stamp), not its last: a UART takes as long to send a line as it is long
        # (8.7 ms for 100 characters at 115200 baud), and the stamp was taken before it began.
        self.pairs: list[tuple[float, float]] = []
        # marker -> (printk time of its line, the kernel clock's epoch it was stamped in)
        self.stamped: dict[str, tuple[float, int]] = {}
        # The kernel's clock can start over: an x86 kernel whose fast TSC calibration failed
        # (a loaded host) stamps its early lines by jiffies, then by the TSC from a new zero
        # ([0.036000] ... [0.000816]). Only the last epoch's pairs place its clock; events
        # stamped in an earlier one keep the host's time.
        self.epoch = 0
        self._last_k = 0.0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._line = ""                                # the line not yet ended by a newline
        # the shell's line not yet ended, kernel log lines taken out: the kernel prints its log
        # between any two bytes of the shell's, and a prompt split by one is still the prompt
        self._shell_line = ""
        self._line_began = 0.0                         # when its first byte was read

    def feed(self, when: float, chunk: bytes) -> None:
        """One chunk as read. Markers, failures and the prompt match within a line: each chunk
        is searched together with the line it continues, never the whole log again (a boot log
        is tens of kilobytes; a console may hand it over a few bytes at a time)."""
        if not chunk:
            return
        self.last_byte = when
        if FIRST_BYTE not in self.timeline.events:
            self.timeline.events[FIRST_BYTE] = round(max(0.0, when - self.power_on), 3)
        decoded = self._decoder.decode(chunk)
        text = self._line + decoded
        start, began = 0, self._line_began if self._line else when
        restarts: list[int] = []                       # where in `text` the clock started over
        while (end := text.find("\n", start)) >= 0:
            if stamp := _STAMP.match(text, start, end):
                k = float(stamp[1])
                if k < self._last_k - CLOCK_RESTART_S:
                    self.epoch += 1
                    self.pairs.clear()
                    restarts.append(start)
                if k > 0:
                    self._last_k = k
                if len(self.pairs) < MAX_PAIRS:
                    self.pairs.append((began - self.power_on, k))
            start, began = end + 1, when
        self._line, self._line_began = text[start:][-MAX_LINE:], began
        for name, rx in list(self.pending.items()):
            if m := rx.search(text):
                self.timeline.events[name] = round(when - self.power_on, 3)
                line_start = text.rfind("\n", 0, m.start()) + 1
                if stamp := _STAMP.match(text, line_start):
                    epoch = self.epoch - sum(1 for at in restarts if at > line_start)
                    self.stamped[name] = (float(stamp[1]), epoch)
                del self.pending[name]
        for rx in self.failure_patterns:
            if self.failure is None and (m := rx.search(text)):
                line_start = text.rfind("\n", 0, m.start()) + 1
                line_end = text.find("\n", m.end())
                self.failure = text[line_start: line_end if line_end >= 0 else None].strip()
        shell = KERNEL_TEXT_LINES.sub("", self._shell_line + decoded)
        self._shell_line = shell[shell.rfind("\n") + 1:][-MAX_LINE:]
        # The prompt counts only after every other marker (a shell prompt cannot precede init);
        # it is searched in the shell's text, kernel lines out, which has every line `text` has
        if (not self.pending and PROMPT not in self.timeline.events and
                self.prompt.search(shell)):
            self.timeline.events[PROMPT] = round(when - self.power_on, 3)

    @property
    def done(self) -> bool:
        return PROMPT in self.timeline.events or self.failure is not None

    def silence_limit(self) -> float | None:
        """The console-silence limit of the stage the boot is in: `silence_after`'s for the
        latest marker reached that has one, else `silence_s` (None: no limit)."""
        reached = sorted((t, name) for name, t in self.timeline.events.items()
                         if name in self.silence_after)
        return self.silence_after[reached[-1][1]] if reached else self.silence_s

    def hung(self, now: float) -> float | None:
        """How long the console has been silent, when that is past the stage's limit: the boot
        hung (TCG stuck in PCI enumeration, a kernel deadlocked) and waiting out the boot
        timeout only wastes board time. None while it is not (or before the first byte: a
        silent console is `SerialSilent`, judged at the timeout)."""
        limit = self.silence_limit()
        if limit is None or self.done or self.last_byte is None:
            return None
        silent = now - self.last_byte
        return silent if silent > limit else None

    def finish(self) -> BootTimeline:
        """The timeline, with the kernel clock fused in."""
        self.timeline.kernel = kernel_clock(
            self.pairs, {name: k for name, (k, epoch) in self.stamped.items()
                         if epoch == self.epoch}, restarts=self.epoch)
        return self.timeline


def timeline_from_chunks(power_on: float, chunks: Iterable[tuple[float, bytes]],
                         markers: Mapping[str, str], prompt: str) -> BootTimeline:
    watcher = BootWatcher(power_on, markers, prompt)
    for when, chunk in chunks:
        watcher.feed(when, chunk)
    return watcher.finish()
