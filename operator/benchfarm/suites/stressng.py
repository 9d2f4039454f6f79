"""stress-ng --metrics-brief: per stressor the bogo-ops count and its rates, bogo ops/s over real
time and over usr+sys time."""

from __future__ import annotations

from benchfarm.errors import ParseError
from benchfarm.suites.base import Metric, Pattern, lines_of, number

SUITE = "stress-ng"
_ROW = Pattern(r"metrc:\s*\[\d+\]\s+([a-z][\w-]*)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+"
               r"([\d.]+)\s+([\d.]+)", "metrc:")


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    """Three metrics per 'metrc:' row: the count and the two rates."""
    out = []
    for i, line in enumerate(lines_of(text), 1):
        if m := _ROW.search(line):
            name = m.group(1)
            out.append(Metric(f"stress-ng-{name}-bogo-ops", number(m.group(2), SUITE, i), "bogo ops"))
            out.append(Metric(f"stress-ng-{name}", number(m.group(6), SUITE, i), "bogo ops/s"))
            out.append(Metric(f"stress-ng-{name}-cpu", number(m.group(7), SUITE, i), "bogo ops/s"))
    if not out:
        raise ParseError(SUITE, "no 'metrc:' stressor row; was --metrics-brief given?")
    return out
