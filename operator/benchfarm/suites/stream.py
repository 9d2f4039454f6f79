"""STREAM: best rate of copy, scale, add and triad (MB/s)."""

from __future__ import annotations

from benchfarm.errors import ParseError
from benchfarm.suites.base import Metric, Pattern, lines_of, number

SUITE = "stream"
_ROW = Pattern(r"^(Copy|Scale|Add|Triad):\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+[\d.]+", ":")


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    out = [Metric(m.group(1).lower(), number(m.group(2), SUITE, i), "MB/s")
           for i, line in enumerate(lines_of(text), 1) if (m := _ROW.match(line.strip()))]
    if not out:
        raise ParseError(SUITE, "no 'Copy:/Scale:/Add:/Triad:' rows")
    return out
