"""ALSA throughput: bits/s and CPU load per sampling rate, as TI's audio tables report them.

Reads lines `rate=<Hz> bytes=<N> seconds=<S> [cpu=<%>]` (what the plan's wrapper around
arecord/aplay prints) and the tables' own layout `"<Hz>","<bits/s>","<cpu %>"`.
"""

from __future__ import annotations

from benchfarm.errors import ParseError
from benchfarm.suites.base import Metric, Pattern, lines_of, number

SUITE = "alsa"
_KV = Pattern(r"rate=(\d+)\s+bytes=(\d+)\s+seconds=([\d.]+)(?:\s+cpu=([\d.]+))?", "rate=")
_CSV = Pattern(r'^"?(\d+)"?\s*,\s*"?([\d.]+)"?\s*,\s*"?([\d.]+)"?\s*$', ",")


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    direction = (params or {}).get("direction", "capture")
    out: list[Metric] = []
    for i, line in enumerate(lines_of(text), 1):
        s = line.strip()
        if m := _KV.search(s):
            rate, nbytes, secs = m.group(1), number(m.group(2), SUITE, i), number(m.group(3), SUITE, i)
            if secs <= 0:
                raise ParseError(SUITE, "seconds must be positive", line=i)
            out.append(Metric(f"alsa-{direction}-{rate}hz-throughput", round(nbytes * 8 / secs, 2),
                              "bits/s"))
            if m.group(4):
                out.append(Metric(f"alsa-{direction}-{rate}hz-cpu", number(m.group(4), SUITE, i),
                                  "%", False))
        elif m := _CSV.match(s):
            rate = m.group(1)
            out.append(Metric(f"alsa-{direction}-{rate}hz-throughput", number(m.group(2), SUITE, i),
                              "bits/s"))
            out.append(Metric(f"alsa-{direction}-{rate}hz-cpu", number(m.group(3), SUITE, i), "%",
                              False))
    if not out:
        raise ParseError(SUITE, "no 'rate= bytes= seconds=' line and no '\"Hz\",bits/s,cpu' row")
    return out
