"""hackbench: scheduler throughput as the time to pass all messages (seconds, lower is better)."""

from __future__ import annotations

import re

from ..errors import ParseError
from .base import Metric, lines_of, number

SUITE = "hackbench"


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    times = []
    mode = None
    for i, line in enumerate(lines_of(text), 1):
        if m := re.match(r"^\s*Time:\s*(\S+)", line):
            times.append(number(m.group(1), SUITE, i))
        elif m := re.match(r"^Running in (\w+) mode with (\d+) groups", line):
            mode = f"{m.group(1)}-g{m.group(2)}"
    if not times:
        raise ParseError(SUITE, "no 'Time:' line")
    labels = {"mode": mode} if mode else {}
    return [Metric("hackbench-time", times[-1], "s", False, labels)]
