"""Dhrystone 2.1: Dhrystones per second, and DMIPS/MHz from the CPU clock (1 DMIPS = 1757/s)."""

from __future__ import annotations

from benchfarm.errors import ParseError
from benchfarm.suites.base import Metric, Pattern, lines_of, number

SUITE = "dhrystone"
VAX_DHRYSTONES_PER_SECOND = 1757.0
_RATE = Pattern(r"Dhrystones per Second:\s*([\d.]+)", "Dhrystones per Second:")


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    params = params or {}
    per_second = None
    for i, line in enumerate(lines_of(text), 1):
        if "Measured time too small" in line:
            raise ParseError(SUITE, "measured time too small; increase the number of runs", line=i)
        if m := _RATE.search(line):
            per_second = number(m.group(1), SUITE, i)
    if per_second is None:
        raise ParseError(SUITE, "no 'Dhrystones per Second:' line")
    out = [Metric("dhrystone_per_second", per_second, "DhrystoneP")]
    dmips = per_second / VAX_DHRYSTONES_PER_SECOND
    out.append(Metric("dhrystone_dmips", round(dmips, 2), "DMIPS"))
    clock = params.get("cpuClockMHz")
    if clock:
        mhz = number(clock, SUITE)
        out.append(Metric("cpu_clock", mhz, "MHz"))
        out.append(Metric("dhrystone_per_mhz", round(dmips / mhz, 2), "DMIPS/MHz"))
    return out
