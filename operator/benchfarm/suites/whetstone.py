"""Whetstone (C converted, double precision): MIPS."""

from __future__ import annotations

import re

from ..errors import ParseError
from .base import Metric, lines_of, number

SUITE = "whetstone"


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    for i, line in enumerate(lines_of(text), 1):
        if m := re.search(r"Whetstones:\s*([\d.]+)\s*MIPS", line):
            return [Metric("whetstone", number(m.group(1), SUITE, i), "MIPS")]
    raise ParseError(SUITE, "no '... Whetstones: N MIPS' line")
