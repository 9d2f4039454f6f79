"""Boot timing from a timestamped serial stream: when each marker first appeared after power-on.

Pure: the board session records (monotonic time, bytes) chunks as they arrive; this turns them into
the events of a boot (first byte, kernel start, init, prompt …) and the phases a device type names
(e.g. kernel-to-prompt, the headline figure of TI's guides).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

POWER_ON = "power-on"
FIRST_BYTE = "first-byte"
PROMPT = "prompt"


@dataclass
class BootTimeline:
    """Seconds since power-on for each event seen; phases are differences of two events."""

    events: dict[str, float] = field(default_factory=dict)

    def phase(self, start: str, end: str) -> float | None:
        if start in self.events and end in self.events:
            return round(self.events[end] - self.events[start], 3)
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

    def feed(self, when: float, chunk: bytes) -> None:
        if not chunk:
            return
        if FIRST_BYTE not in self.timeline.events:
            self.timeline.events[FIRST_BYTE] = round(max(0.0, when - self.power_on), 3)
        self.text += chunk.decode("utf-8", errors="replace")
        for name, rx in list(self.pending.items()):
            if rx.search(self.text):
                self.timeline.events[name] = round(when - self.power_on, 3)
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


def timeline_from_chunks(power_on: float, chunks: Iterable[tuple[float, bytes]],
                         markers: Mapping[str, str], prompt: str) -> BootTimeline:
    watcher = BootWatcher(power_on, markers, prompt)
    for when, chunk in chunks:
        watcher.feed(when, chunk)
    return watcher.timeline
