"""console-timing: cycle counts printed by an RTOS or DSP target, converted to microseconds.

For targets with no Linux (seed 003's DSP/BIOS timings): the plan gives `clockMHz` and, if the
target prints something other than `NAME  CYCLES`, a `pattern` regex with the named groups
`name` and `cycles`. Each kernel call becomes `<name>-cycles (cycles)` and `<name> (us)`.
The pattern is user input: it is compiled by RE2, whose matching time is linear in the text, so
no pattern can stall the session that parses (or the operator that admits it).

Memory access latencies (the AM62x note's "critical memory access latency" of the A53, R5F and
M4F cores): a bare-metal test on an MCU core reads a memory target in a loop and prints the cycles
the loop took; the plan reads the core's console (on Linux, its remoteproc trace:
`cat /sys/kernel/debug/remoteproc/remoteproc0/trace0`) and gives `accesses` (reads per loop,
8192 there), `table` (the guide table, `critical-memory-access-latency`) and `core` (the column,
`r5f_wkup`). Each target then becomes `<table>-<target>-<core> (ns)`, one read's latency, so
the guide's table has a row per memory target and a column per core.
"""

from __future__ import annotations

import re2

from benchfarm.errors import ParseError
from benchfarm.suites.base import (
    Metric,
    Pattern,
    count_parameter,
    lines_of,
    number,
    slug,
    table_problem,
)

SUITE = "console-timing"
DEFAULT_PATTERN = r"^\s*(?P<name>[A-Za-z][A-Za-z0-9]*_\w+)\s+(?P<cycles>\d+)\b"
_CORE = re2.compile(r"^[a-z0-9_]+$")


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
    if problem := table_problem(params):
        return problem
    accesses = params.get("accesses", "1")
    if count_parameter(accesses) is None:
        return f"accesses {accesses!r} is not a positive number of reads"
    core = params.get("core")
    if core is not None and ("table" not in params or not _CORE.match(core)):
        return (f"core {core!r} needs a table, and is a column's short name (lower-case letters, "
                "digits and '_', e.g. r5f_wkup)")
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
    # the default names a kernel call NAME_call: a line without '_' is not handed to RE2
    rx = Pattern(params["pattern"]) if "pattern" in params else Pattern(DEFAULT_PATTERN, "_")
    table, accesses = params.get("table"), count_parameter(params.get("accesses", "1")) or 1
    out: list[Metric] = []
    for i, line in enumerate(lines_of(text), 1):
        if m := rx.search(line):
            cycles = number(m.group("cycles"), SUITE, i)
            name = m.group("name")
            if table is None and accesses == 1:
                out.append(Metric(f"{name}-cycles", cycles, "cycles", False))
                out.append(Metric(name, round(cycles / mhz, 4), "us", False,
                                  {"clockMHz": f"{mhz:g}"}))
                continue
            target = slug(name)
            full = "-".join(p for p in (table, target, params.get("core")) if p)
            out.append(Metric(full, round(cycles / accesses / mhz * 1000, 2), "ns", False,
                              {"clockMHz": f"{mhz:g}", "accesses": str(accesses)}))
    if not out:
        raise ParseError(SUITE, "no line matched the timing pattern")
    return out
