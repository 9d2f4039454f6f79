"""console-timing: cycle counts printed by an RTOS or DSP target, converted to microseconds.

For targets with no Linux (seed 003's DSP/BIOS timings): the plan gives `clockMHz` and, if the
target prints something other than `NAME  CYCLES`, a `pattern` regex with the named groups
`name` and `cycles`. Each kernel call becomes `<name>-cycles (cycles)` and `<name> (us)`.
"""

from __future__ import annotations

import re

from ..errors import ParseError
from .base import Metric, lines_of, number

SUITE = "console-timing"
DEFAULT_PATTERN = r"^\s*(?P<name>[A-Za-z][A-Za-z0-9]*_\w+)\s+(?P<cycles>\d+)\b"


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    params = params or {}
    if "clockMHz" not in params:
        raise ParseError(SUITE, "parameter clockMHz is required to convert cycles to microseconds")
    mhz = number(params["clockMHz"], SUITE)
    if mhz <= 0:
        raise ParseError(SUITE, f"clockMHz must be positive, got {mhz}")
    try:
        rx = re.compile(params.get("pattern", DEFAULT_PATTERN))
    except re.error as exc:
        raise ParseError(SUITE, f"bad pattern: {exc}") from exc
    if not {"name", "cycles"} <= set(rx.groupindex):
        raise ParseError(SUITE, "pattern needs the named groups 'name' and 'cycles'")
    out: list[Metric] = []
    for i, line in enumerate(lines_of(text), 1):
        if m := rx.search(line):
            cycles = number(m.group("cycles"), SUITE, i)
            name = m.group("name")
            out.append(Metric(f"{name}-cycles", cycles, "cycles", False))
            out.append(Metric(name, round(cycles / mhz, 4), "us", False, {"clockMHz": f"{mhz:g}"}))
    if not out:
        raise ParseError(SUITE, "no line matched the timing pattern")
    return out
