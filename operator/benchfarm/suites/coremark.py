"""CoreMark: iterations/s, only when the run validated ('Correct operation validated')."""

from __future__ import annotations

import re

from ..errors import ParseError
from .base import Metric, lines_of, number

SUITE = "coremark"


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    value, validated = None, False
    for i, line in enumerate(lines_of(text), 1):
        if m := re.match(r"^Iterations/Sec\s*:\s*([\d.]+)", line.strip()):
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
