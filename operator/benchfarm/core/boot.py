"""Boot timing from a timestamped serial stream: when each marker first appeared after power-on.

Pure: the board session records (monotonic time, bytes) chunks as they arrive; this turns them into
the events of a boot (first byte, kernel start, init, prompt …) and the phases a device type names
(e.g. kernel-to-prompt, the headline figure of TI's guides).

Two clocks see a boot: the host's, when each chunk arrived (milliseconds, and late by however
long the kernel held its log before the console was up), and the kernel's printk stamps
(`[    1.234567]`, microseconds from kernel start). Lines carrying a stamp pair the two; the
kernel clock's offset from power-on is the lower envelope of host minus kernel time (a line is
never received before it is printed). Events on a stamped line are dated by the kernel clock
plus that offset, the others by the host; phases come from that fused timeline, and how far the
host saw lines after the fused clock says (the disagreement) is reported with it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

POWER_ON = "power-on"
FIRST_BYTE = "first-byte"
PROMPT = "prompt"
_STAMP = re.compile(r"\r?\[\s*(\d+\.\d+)\]")
MAX_PAIRS = 4000        # stamped lines kept per boot (memory stays bounded)


@dataclass
class KernelClock:
    """The kernel's printk clock placed on the host's: offset and how well the two agree."""

    offset: float                      # seconds from power-on to the kernel's time zero
    events: dict[str, float]           # events on stamped lines, in seconds since power-on
    lines: int
    median_ms: float                   # host arrival minus fused time, over stamped lines
    p95_ms: float

    def as_dict(self) -> dict[str, object]:
        return {"offset": round(self.offset, 6), "events": self.events, "lines": self.lines,
                "disagreementMs": {"median": self.median_ms, "p95": self.p95_ms}}


def kernel_clock(pairs: list[tuple[float, float]], stamped: Mapping[str, float]) -> KernelClock | None:
    """From (host seconds since power-on, printk seconds) pairs; None without usable stamps.
    Stamps of 0.000000 come before the kernel's clock runs and say nothing about it."""
    usable = [(h, k) for h, k in pairs if k > 0]
    if not usable:
        return None
    offset = min(h - k for h, k in usable)
    residuals = sorted((h - (k + offset)) * 1000 for h, k in usable)
    return KernelClock(offset, {name: round(k + offset, 6) for name, k in stamped.items()},
                       len(usable), round(residuals[len(residuals) // 2], 3),
                       round(residuals[min(len(residuals) - 1, int(len(residuals) * 0.95))], 3))


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
                 failures: Iterable[str] = ()) -> None:
        self.power_on = power_on
        self.failure_patterns = [re.compile(rx) for rx in failures]
        self.failure: str | None = None
        self.pending = {name: re.compile(rx) for name, rx in markers.items()}
        self.prompt = re.compile(prompt)
        self.text = ""
        self.timeline = BootTimeline({POWER_ON: 0.0})
        self.pairs: list[tuple[float, float]] = []     # (host, kernel) of stamped lines
        self.stamped: dict[str, float] = {}            # marker -> printk time of its line
        self._scanned = 0                              # text before this is split into lines

    def feed(self, when: float, chunk: bytes) -> None:
        if not chunk:
            return
        if FIRST_BYTE not in self.timeline.events:
            self.timeline.events[FIRST_BYTE] = round(max(0.0, when - self.power_on), 3)
        self.text += chunk.decode("utf-8", errors="replace")
        while (end := self.text.find("\n", self._scanned)) >= 0:
            stamp = _STAMP.match(self.text, self._scanned, end)
            if stamp and len(self.pairs) < MAX_PAIRS:
                self.pairs.append((when - self.power_on, float(stamp[1])))
            self._scanned = end + 1
        for name, rx in list(self.pending.items()):
            if m := rx.search(self.text):
                self.timeline.events[name] = round(when - self.power_on, 3)
                stamp = _STAMP.match(self.text, self.text.rfind("\n", 0, m.start()) + 1)
                if stamp:
                    self.stamped[name] = float(stamp[1])
                del self.pending[name]
        # The prompt counts only after every other marker (a shell prompt cannot precede init).
        for rx in self.failure_patterns:
            if self.failure is None and (m := rx.search(self.text)):
                line_start = self.text.rfind("\n", 0, m.start()) + 1
                line_end = self.text.find("\n", m.end())
                self.failure = self.text[line_start: line_end if line_end >= 0 else None].strip()
        if not self.pending and PROMPT not in self.timeline.events and self.prompt.search(self.text):
            self.timeline.events[PROMPT] = round(when - self.power_on, 3)

    @property
    def done(self) -> bool:
        return PROMPT in self.timeline.events or self.failure is not None

    def finish(self) -> BootTimeline:
        """The timeline, with the kernel clock fused in."""
        self.timeline.kernel = kernel_clock(self.pairs, self.stamped)
        return self.timeline


def timeline_from_chunks(power_on: float, chunks: Iterable[tuple[float, bytes]],
                         markers: Mapping[str, str], prompt: str) -> BootTimeline:
    watcher = BootWatcher(power_on, markers, prompt)
    for when, chunk in chunks:
        watcher.feed(when, chunk)
    return watcher.finish()
