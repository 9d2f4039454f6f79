"""NBench (BYTEmark): iterations/s per test, and the Linux (AMD K6 baseline) indexes."""

from __future__ import annotations

from benchfarm.errors import ParseError
from benchfarm.suites.base import Metric, Pattern, lines_of, number

SUITE = "nbench"
_ROW = Pattern(r"^([A-Z][A-Z -]+?)\s*:\s*([\d.e+]+)\s*:\s*[\d.]+\s*:\s*[\d.]+\s*$", ":")
_INDEX = Pattern(r"^(MEMORY|INTEGER|FLOATING-POINT) INDEX\s*:\s*([\d.]+)", " INDEX")


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    out: list[Metric] = []
    indexes: dict[str, tuple[int, float]] = {}
    for i, line in enumerate(lines_of(text), 1):
        s = line.strip()
        if m := _ROW.match(s):
            name = m.group(1).strip().lower().replace(" ", "_").replace("-", "_")
            out.append(Metric(name, number(m.group(2), SUITE, i), "iterations"))
        elif m := _INDEX.match(s):
            indexes[m.group(1)] = (i, number(m.group(2), SUITE, i))  # last set is the Linux one
    for kind, (_, value) in indexes.items():
        out.append(Metric(f"nbench-{kind.lower()}-index", value, ""))
    if not out:
        raise ParseError(SUITE, "no 'TEST : Iterations/sec. : …' row")
    return out
