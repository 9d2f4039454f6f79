"""LINPACK (C, rolled/unrolled): KFLOPS of the longest (last) timing row."""

from __future__ import annotations

from benchfarm.errors import ParseError
from benchfarm.suites.base import Metric, Pattern, lines_of, number

SUITE = "linpack"
_ROW = Pattern(r"^\s*(\d+)\s+([\d.]+)\s+[\d.]+%\s+[\d.]+%\s+[\d.]+%\s+([\d.]+)\s*$", "%")


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    rows = [(i, m) for i, line in enumerate(lines_of(text), 1) if (m := _ROW.match(line))]
    if not rows:
        raise ParseError(SUITE, "no 'Reps Time DGEFA DGESL OVERHEAD KFLOPS' row")
    i, m = rows[-1]
    return [Metric("linpack", number(m.group(3), SUITE, i), "KFLOPS")]
