"""mbw: memory copy bandwidth per method (MiB/s), from its AVG lines."""

from __future__ import annotations

from benchfarm.errors import ParseError
from benchfarm.suites.base import Metric, Pattern, lines_of, number

SUITE = "mbw"
_AVG = Pattern(r"^AVG\s+Method:\s*(\S+)\s+Elapsed:\s*\S+\s+MiB:\s*\S+\s+Copy:\s*(\S+)\s*MiB/s", "AVG")


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    out = []
    for i, line in enumerate(lines_of(text), 1):
        if m := _AVG.match(line.strip()):
            out.append(Metric(f"mbw-{m.group(1).lower()}", number(m.group(2), SUITE, i), "MiB/s"))
    if not out:
        raise ParseError(SUITE, "no 'AVG Method: ... Copy: ... MiB/s' line")
    return out
