"""netperf with -k/-o output selectors: KEY=VALUE lines, throughput in the test's units.

Names: `netperf-<table>-throughput`, `-local-cpu-util` (the guides' "CPU Load % (LOCAL_CPU_UTIL)")
and the other latency/utilisation keys, where <table> is `parameters.table` (the guide table the
figures belong to, e.g. `cpsw2g-tcp-bidirectional-throughput`), else the test (`tcp-stream`).
A UDP test that prints LOCAL_SEND_SIZE adds the Ethernet frame size the guides' UDP tables are
keyed by: the datagram plus 46 bytes of UDP, IP and Ethernet headers and FCS (1472 -> 1518).
"""

from __future__ import annotations

import re2

from benchfarm.errors import ParseError
from benchfarm.suites.base import Metric, Pattern, lines_of, number, table_problem

SUITE = "netperf"
_KV = Pattern(r"^([A-Z][A-Z0-9_]+)=(.*)$", "=")
_FIGURE = re2.compile(r"^-?[\d.]+$")
_LOWER_BETTER = ("LATENCY", "RT_LATENCY", "P50", "P90", "P99", "STDDEV", "UTIL")
_UDP_FRAME_OVERHEAD = 8 + 20 + 14 + 4   # UDP, IPv4 and Ethernet headers, frame check sequence


def check(params: dict[str, str]) -> str | None:
    """What is wrong with the parameters, checked at admission too; None when they are fine."""
    return table_problem(params)


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    if problem := check(params or {}):
        raise ParseError(SUITE, problem)
    kv: dict[str, tuple[int, str]] = {}
    for i, line in enumerate(lines_of(text), 1):
        if m := _KV.match(line.strip()):
            kv[m.group(1)] = (i, m.group(2).strip())
    if "THROUGHPUT" not in kv:
        raise ParseError(SUITE, "no THROUGHPUT= line; run netperf with -k (or -o THROUGHPUT,...)")
    test = kv.get("TEST", (0, ""))[1] or kv.get("PROTOCOL", (0, ""))[1]
    table = (params or {}).get("table") or test.lower().replace("_", "-")
    prefix = f"netperf-{table}" if table else "netperf"
    size = kv.get("LOCAL_SEND_SIZE", (0, ""))
    if "UDP" in test.upper() and size[1]:
        prefix += f"-{round(number(size[1], SUITE, size[0])) + _UDP_FRAME_OVERHEAD}"
    unit = kv.get("THROUGHPUT_UNITS", (0, ""))[1] or ""
    out = [Metric(f"{prefix}-throughput", number(kv["THROUGHPUT"][1], SUITE, kv["THROUGHPUT"][0]),
                  {"10^6bits/s": "Mbit/s", "10^9bits/s": "Gbit/s"}.get(unit, unit))]
    for key, (lineno, value) in kv.items():
        if key in ("THROUGHPUT", "THROUGHPUT_UNITS") or not _FIGURE.match(value):
            continue
        if key.endswith(("LATENCY", "UTIL")) or key.startswith(("P50", "P90", "P99", "MEAN")):
            unit = "us" if "LATENCY" in key or key.startswith(("P", "MEAN")) else "%"
            out.append(Metric(f"{prefix}-{key.lower().replace('_', '-')}", number(value, SUITE, lineno),
                              unit, not key.startswith(_LOWER_BETTER) and "LATENCY" not in key))
    return out
