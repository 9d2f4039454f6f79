"""console-timing: cycle counts printed by an RTOS or DSP target, converted to microseconds.

For targets with no Linux (seed 003's DSP/BIOS timings): the plan gives `clockMHz` and, if the
target prints something other than `NAME  CYCLES`, a `pattern` regex with the named groups
`name` and `cycles`. Each kernel call becomes `<name>-cycles (cycles)` and `<name> (us)`.
The pattern is user input: it is compiled by RE2, whose matching time is linear in the text, so
no pattern can stall the session that parses (or the operator that admits it).
"""

from __future__ import annotations

import re2

from ..errors import ParseError
from .base import Metric, lines_of, number

SUITE = "console-timing"
DEFAULT_PATTERN = r"^\s*(?P<name>[A-Za-z][A-Za-z0-9]*_\w+)\s+(?P<cycles>\d+)\b"


def check(params: dict[str, str]) -> str | None:
    """What is wrong with the parameters, checked at admission too; None when they are fine."""
    try:
        rx = re2.compile(params.get("pattern", DEFAULT_PATTERN))
    except re2.error as exc:
        detail = exc.args[0].decode(errors="replace") if exc.args and isinstance(
            exc.args[0], bytes) else str(exc)
        return f"bad pattern (RE2 syntax): {detail}"
    if not {"name", "cycles"} <= set(rx.groupindex):
        return "pattern needs the named groups 'name' and 'cycles'"
    return None


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    params = params or {}
    if "clockMHz" not in params:
        raise ParseError(SUITE, "parameter clockMHz is required to convert cycles to microseconds")
    mhz = number(params["clockMHz"], SUITE)
    if mhz <= 0:
        raise ParseError(SUITE, f"clockMHz must be positive, got {mhz}")
    problem = check(params)
    if problem:
        raise ParseError(SUITE, problem)
    rx = re2.compile(params.get("pattern", DEFAULT_PATTERN))
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
