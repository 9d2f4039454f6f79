"""boot-time: phase durations a board session measured, given as 'phase=seconds' lines."""

from __future__ import annotations

import re

from ..errors import ParseError
from .base import Metric, lines_of, number

SUITE = "boot-time"


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    out = []
    for i, line in enumerate(lines_of(text), 1):
        if m := re.match(r"^\s*([a-z][\w-]*)\s*=\s*([\d.]+)\s*$", line):
            out.append(Metric(f"boot-{m.group(1)}", number(m.group(2), SUITE, i), "s", False))
    if not out:
        raise ParseError(SUITE, "no 'phase=seconds' line")
    return out
