"""cyclictest: per-thread min/avg/max wake-up latency (us) and the overall figures.

Reads the normal, quiet (-q) and histogram (-h N) outputs, and the summary file written with
--json=FILE (same metric names). In normal mode cyclictest redraws its lines in place, so the last
line of each thread is its final result.
"""

from __future__ import annotations

from benchfarm.errors import ParseError
from benchfarm.suites.base import Metric, Pattern, integer, json_object, lines_of

SUITE = "cyclictest"
_THREAD = Pattern(r"^T:\s*(\d+)\s+\(\s*\d+\)\s+P:\s*\d+\s+I:\s*\d+\s+C:\s*(\d+)\s+"
                  r"Min:\s*(\d+)\s+Act:\s*(\d+)\s+Avg:\s*(\d+)\s+Max:\s*(\d+)", "Max:")
_HIST_SUMMARY = Pattern(r"^#\s*(Min|Avg|Max) Latencies:\s*([\d\s]+)$", "Latencies:")
_HIST_ROW = Pattern(r"^(\d{6})\s+([\d\s]+)$", " ", "\t")
Threads = dict[int, tuple[float, float, float]]  # thread -> (min, avg, max) in us
Histogram = dict[int, list[int]]                 # bucket (us) -> samples per thread


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    """Per-thread and overall min/avg/max, histogram buckets summed over threads."""
    if "{" in text:  # the text outputs never hold a brace; a --json file always does
        return _metrics(*_from_json(text))
    return _metrics(*_from_text(text))


def _from_text(text: str) -> tuple[Threads, Histogram]:
    threads: Threads = {}
    hist_summary: dict[str, list[int]] = {}
    histogram: Histogram = {}
    for line in lines_of(text):
        line = line.strip()
        if m := _THREAD.search(line):
            t, _count, lo, _act, avg, hi = (integer(g, SUITE) for g in m.groups())
            threads[t] = (lo, avg, hi)
        elif m := _HIST_SUMMARY.match(line):
            hist_summary[m.group(1)] = [integer(x, SUITE) for x in m.group(2).split()]
        elif m := _HIST_ROW.match(line):
            histogram[int(m.group(1))] = [integer(x, SUITE) for x in m.group(2).split()]
    if not threads and "Max" in hist_summary:
        for t, (lo, avg, hi) in enumerate(zip(hist_summary.get("Min", []),
                                               hist_summary.get("Avg", []), hist_summary["Max"],
                                               strict=False)):
            threads[t] = (lo, avg, hi)
    if not threads:
        raise ParseError(SUITE, "no 'T: <n> ... Min: Act: Avg: Max:' line and no histogram summary")
    return threads, histogram


def _from_json(text: str) -> tuple[Threads, Histogram]:
    """--json=FILE: {"thread": {"0": {"min", "avg", "max", "histogram": {"<us>": count}}}}."""
    data = json_object(text, SUITE, "give the file cyclictest wrote with --json=FILE")
    per_thread = data.get("thread")
    if not isinstance(per_thread, dict) or not per_thread:
        raise ParseError(SUITE, "JSON has no 'thread' results (not a cyclictest --json file?); "
                                f"return_code {data.get('return_code', 'missing')}")
    threads: Threads = {}
    histogram: Histogram = {}
    for key, result in per_thread.items():
        try:
            lo, avg, hi = (float(result[k]) for k in ("min", "avg", "max"))
            threads[int(key)] = (lo, avg, hi)
            for bucket, count in result.get("histogram", {}).items():
                histogram.setdefault(int(bucket), []).append(int(count))
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise ParseError(SUITE, f"thread {key!r}: expected numbers min, avg, max and a histogram "
                                    f"of integer buckets, found {str(result)[:120]}") from exc
    return threads, histogram


def _metrics(threads: Threads, histogram: Histogram) -> list[Metric]:
    out: list[Metric] = []
    for t in sorted(threads):
        lo, avg, hi = threads[t]
        labels = {"thread": str(t)}
        out += [Metric(f"cyclictest-t{t}-min", lo, "us", False, labels),
                Metric(f"cyclictest-t{t}-avg", avg, "us", False, labels),
                Metric(f"cyclictest-t{t}-max", hi, "us", False, labels)]
    out += [Metric("cyclictest-min", min(v[0] for v in threads.values()), "us", False),
            Metric("cyclictest-avg", round(sum(v[1] for v in threads.values()) / len(threads), 2),
                   "us", False),
            Metric("cyclictest-max", max(v[2] for v in threads.values()), "us", False)]
    for bucket, counts in sorted(histogram.items()):
        if any(counts):
            out.append(Metric(f"cyclictest-hist-{bucket}us", sum(counts), "samples", False,
                              {"bucket_us": str(bucket)}))
    return out
