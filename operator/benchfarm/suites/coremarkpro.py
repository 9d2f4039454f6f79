"""CoreMark-PRO: per-workload iterations/s and the mark, single-core and multi-core.

Names follow TI's tables: `<workload> (workloads/)` and `coremark-pro ()` for one core; the
multi-core figures carry a `-multicore` suffix.
"""

from __future__ import annotations

from benchfarm.errors import ParseError
from benchfarm.suites.base import Metric, Pattern, lines_of, number

SUITE = "coremark-pro"
_ROW = Pattern(r"^([A-Za-z][\w.-]*)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    out: list[Metric] = []
    section = None
    for i, line in enumerate(lines_of(text), 1):
        s = line.strip()
        if s.startswith("WORKLOAD RESULTS TABLE"):
            section = "workload"
        elif s.startswith("MARK RESULTS TABLE"):
            section = "mark"
        elif section and (m := _ROW.match(s)):
            multi, single = number(m.group(2), SUITE, i), number(m.group(3), SUITE, i)
            if section == "workload":
                out.append(Metric(m.group(1), single, "workloads/"))
                out.append(Metric(f"{m.group(1)}-multicore", multi, "workloads/"))
            elif m.group(1) == "CoreMark-PRO":
                out.append(Metric("coremark-pro", single, ""))
                out.append(Metric("coremark-pro-multicore", multi, ""))
                out.append(Metric("coremark-pro-scaling", number(m.group(4), SUITE, i), ""))
    if not any(m.name == "coremark-pro" for m in out):
        raise ParseError(SUITE, "no 'MARK RESULTS TABLE' with a CoreMark-PRO row")
    return out
