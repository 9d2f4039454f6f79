"""7-Zip benchmark (7z b): average compression/decompression speed and rating (MIPS), and the
'Tot:' line: CPU usage (%), rating per usage (R/U, MIPS) and rating (MIPS) over both."""

from __future__ import annotations

from benchfarm.errors import ParseError
from benchfarm.suites.base import Metric, Pattern, lines_of, number

SUITE = "7zip"
_AVR = Pattern(r"^Avr:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*\|\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", "Avr:")
_TOT = Pattern(r"^Tot:\s+(\d+)\s+(\d+)\s+(\d+)", "Tot:")


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    """Four metrics from the 'Avr:' line, three from the 'Tot:' line."""
    out: list[Metric] = []
    for i, line in enumerate(lines_of(text), 1):
        s = line.strip()
        if m := _AVR.match(s):
            out.append(Metric("7zip-compress-speed", number(m.group(1), SUITE, i), "KB/s"))
            out.append(Metric("7zip-compress-rating", number(m.group(4), SUITE, i), "MIPS"))
            out.append(Metric("7zip-decompress-speed", number(m.group(5), SUITE, i), "KB/s"))
            out.append(Metric("7zip-decompress-rating", number(m.group(8), SUITE, i), "MIPS"))
        elif m := _TOT.match(s):
            out.append(Metric("7zip-total-usage", number(m.group(1), SUITE, i), "%"))
            out.append(Metric("7zip-total-ru", number(m.group(2), SUITE, i), "MIPS"))
            out.append(Metric("7zip-total-rating", number(m.group(3), SUITE, i), "MIPS"))
        elif s.startswith(("Avr:", "Tot:")):
            raise ParseError(SUITE, f"summary row of another shape: {s[:80]!r}", line=i)
    if not out:
        raise ParseError(SUITE, "no 'Avr:' / 'Tot:' summary rows")
    return out
