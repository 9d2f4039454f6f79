"""CoreMark: iterations/s, only when the run validated ('Correct operation validated')."""

from __future__ import annotations

from benchfarm.errors import ParseError
from benchfarm.suites.base import Metric, Pattern, lines_of, number

SUITE = "coremark"
_RATE = Pattern(r"^Iterations/Sec\s*:\s*([\d.]+)", "Iterations/Sec")


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    value, validated = None, False
    for i, line in enumerate(lines_of(text), 1):
        if m := _RATE.match(line.strip()):
            value = number(m.group(1), SUITE, i)
        if "Correct operation validated" in line:
            validated = True
        if "Errors detected" in line or "ERROR!" in line:
            raise ParseError(SUITE, "CoreMark reported errors", line=i)
    if value is None:
        raise ParseError(SUITE, "no 'Iterations/Sec :' line")
    if not validated:
        raise ParseError(SUITE, "result not validated (no 'Correct operation validated')")
    return [Metric("coremark", value, "iter/s")]
