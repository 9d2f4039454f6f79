"""Whetstone (C converted, double precision): MIPS."""

from __future__ import annotations

from benchfarm.errors import ParseError
from benchfarm.suites.base import Metric, Pattern, lines_of, number

SUITE = "whetstone"
_MIPS = Pattern(r"Whetstones:\s*([\d.]+)\s*MIPS", "Whetstones:")


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    for i, line in enumerate(lines_of(text), 1):
        if m := _MIPS.search(line):
            return [Metric("whetstone", number(m.group(1), SUITE, i), "MIPS")]
    raise ParseError(SUITE, "no '... Whetstones: N MIPS' line")
