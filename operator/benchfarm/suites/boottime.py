"""boot-time: phase durations a board session measured, given as 'phase=seconds' lines."""

from __future__ import annotations

from benchfarm.errors import ParseError
from benchfarm.suites.base import Metric, Pattern, lines_of, number

SUITE = "boot-time"
_PHASE = Pattern(r"^\s*([a-z][\w-]*)\s*=\s*([\d.]+)\s*$", "=")


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    out = []
    for i, line in enumerate(lines_of(text), 1):
        if m := _PHASE.match(line):
            out.append(Metric(f"boot-{m.group(1)}", number(m.group(2), SUITE, i), "s", False))
    if not out:
        raise ParseError(SUITE, "no 'phase=seconds' line")
    return out
