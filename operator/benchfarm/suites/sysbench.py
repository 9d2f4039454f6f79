"""sysbench: cpu events/s, memory MiB/s and ops/s, and the latency percentiles it prints."""

from __future__ import annotations

from benchfarm.errors import ParseError
from benchfarm.suites.base import Metric, Pattern, lines_of, number

SUITE = "sysbench"
_EVENTS = Pattern(r"^events per second:\s*(\S+)", "events per second:")
_OPERATIONS = Pattern(r"^Total operations:\s*\d+\s*\((\S+) per second\)", "Total operations:")
_TRANSFERRED = Pattern(r"^[\d.]+ MiB transferred \((\S+) MiB/sec\)", " MiB transferred (")
_LATENCY = Pattern(r"^(min|avg|max|95th percentile):\s*(\S+)", ":")


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    out: list[Metric] = []
    section = ""
    for i, line in enumerate(lines_of(text), 1):
        s = line.strip()
        if m := _EVENTS.match(s):
            out.append(Metric("sysbench-cpu-events", number(m.group(1), SUITE, i), "events/s"))
        elif m := _OPERATIONS.match(s):
            out.append(Metric("sysbench-memory-ops", number(m.group(1), SUITE, i), "ops/s"))
        elif m := _TRANSFERRED.match(s):
            out.append(Metric("sysbench-memory-bw", number(m.group(1), SUITE, i), "MiB/s"))
        elif s.startswith("Latency (ms)"):
            section = "latency"
        elif section == "latency" and (m := _LATENCY.match(s)):
            name = "p95" if m.group(1).startswith("95") else m.group(1)
            out.append(Metric(f"sysbench-latency-{name}", number(m.group(2), SUITE, i), "ms", False))
        elif not s:
            section = "" if section == "latency" and out and out[-1].name.endswith("p95") else section
    if not any(not m.name.startswith("sysbench-latency") for m in out):
        raise ParseError(SUITE, "no 'events per second' or 'MiB transferred' line")
    return out
