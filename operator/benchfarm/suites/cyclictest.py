"""cyclictest: per-thread min/avg/max wake-up latency (us) and the overall figures.

Reads the normal, quiet (-q) and histogram (-h N) outputs. In normal mode cyclictest redraws its
lines in place, so the last line of each thread is its final result.
"""

from __future__ import annotations

import re

from ..errors import ParseError
from .base import Metric, lines_of

SUITE = "cyclictest"
_THREAD = re.compile(r"^T:\s*(\d+)\s+\(\s*\d+\)\s+P:\s*\d+\s+I:\s*\d+\s+C:\s*(\d+)\s+"
                     r"Min:\s*(\d+)\s+Act:\s*(\d+)\s+Avg:\s*(\d+)\s+Max:\s*(\d+)")
_HIST_SUMMARY = re.compile(r"^#\s*(Min|Avg|Max) Latencies:\s*([\d\s]+)$")
_HIST_ROW = re.compile(r"^(\d{6})\s+([\d\s]+)$")


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    threads: dict[int, tuple[int, int, int, int]] = {}
    hist_summary: dict[str, list[int]] = {}
    histogram: dict[int, list[int]] = {}
    for line in lines_of(text):
        line = line.strip()
        if m := _THREAD.search(line):
            t, count, lo, _act, avg, hi = (int(g) for g in m.groups())
            threads[t] = (count, lo, avg, hi)
        elif m := _HIST_SUMMARY.match(line):
            hist_summary[m.group(1)] = [int(x) for x in m.group(2).split()]
        elif m := _HIST_ROW.match(line):
            histogram[int(m.group(1))] = [int(x) for x in m.group(2).split()]
    if not threads and "Max" in hist_summary:
        for t, (lo, avg, hi) in enumerate(zip(hist_summary.get("Min", []),
                                               hist_summary.get("Avg", []), hist_summary["Max"])):
            threads[t] = (0, lo, avg, hi)
    if not threads:
        raise ParseError(SUITE, "no 'T: <n> ... Min: Act: Avg: Max:' line and no histogram summary")
    out: list[Metric] = []
    for t in sorted(threads):
        _count, lo, avg, hi = threads[t]
        labels = {"thread": str(t)}
        out += [Metric(f"cyclictest-t{t}-min", lo, "us", False, labels),
                Metric(f"cyclictest-t{t}-avg", avg, "us", False, labels),
                Metric(f"cyclictest-t{t}-max", hi, "us", False, labels)]
    out += [Metric("cyclictest-min", min(v[1] for v in threads.values()), "us", False),
            Metric("cyclictest-avg", round(sum(v[2] for v in threads.values()) / len(threads), 2),
                   "us", False),
            Metric("cyclictest-max", max(v[3] for v in threads.values()), "us", False)]
    for bucket, counts in sorted(histogram.items()):
        if any(counts):
            out.append(Metric(f"cyclictest-hist-{bucket}us", sum(counts), "samples", False,
                              {"bucket_us": str(bucket)}))
    return out
