"""EEMBC MultiBench: workloads per second for each workload, named as TI's tables do.

Reads the harness's result lines `-- <workload> ... <N> workloads/s` or the summary table rows
`<workload>  <iterations/s>`; the plan may give `suffix` (e.g. the context count) for the names.
"""

from __future__ import annotations

from benchfarm.errors import ParseError
from benchfarm.suites.base import Metric, Pattern, lines_of, number

SUITE = "multibench"
_MITH = Pattern(r"(?i)^--\s*(?P<name>[\w.+-]+).*?(?P<value>[\d.]+)\s*workloads/s", "--")
_ROW = Pattern(r"^(?P<name>\d+[mM]-[\w.+-]+|[a-z][\w.+-]*-[\w.+-]+)\s+(?P<value>[\d.]+)\s*$", "-")


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    suffix = (params or {}).get("suffix", "")
    out: list[Metric] = []
    for i, line in enumerate(lines_of(text), 1):
        s = line.strip()
        m = _MITH.match(s) or _ROW.match(s)
        if m:
            out.append(Metric(m.group("name") + (f"-{suffix}" if suffix else ""),
                              number(m.group("value"), SUITE, i), "workloads/"))
    if not out:
        raise ParseError(SUITE, "no workload result line")
    return out
