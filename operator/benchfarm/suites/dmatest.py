"""dmatest: the kernel's DMA engine test, as the guides' "DDR to DDR block copy" tables.

The module prints one summary per thread into the kernel log (`drivers/dma/dmatest.c`):

    dmatest: dma0chan0-copy0: summary 10000 tests, 0 failures 78864.35 iops 78868 KB/s (0)

It does not print the buffer size, so the step says it before each run, as reading the module's
parameter does (`grep -H . /sys/module/dmatest/parameters/test_buf_size` prints
`/sys/module/dmatest/parameters/test_buf_size:1024`; `test_buf_size=1024` works too), or gives one
size for the whole step as `parameters.bufferSize` (bytes). Buffers are copied whole (`norandom`,
as the guides measure): the throughput is dmatest's KB/s (KiB per second) in MiB/s, summed over the
threads of one size, and the latency one copy's time, 1/iops, averaged over those threads.

Names: `dmatest-<table>-<KiB>-<class>-throughput` (MiB/s) and `-latency` (us), where <table> is
`parameters.table` (default `ddr-to-ddr-block-copy`) and <class> the UDMA channel class the
channel belongs to, `parameters.channelClass` (default `nc`, normal capacity), as the AM62x note's
table "UDMA: DDR to DDR block copy" has them by buffer size (KiB).
A thread that reports failures or a non-zero result makes the step a suite failure.
"""

from __future__ import annotations

import re2

from benchfarm.errors import ParseError
from benchfarm.suites.base import (
    Metric,
    Pattern,
    count_parameter,
    integer,
    lines_of,
    number,
    table_problem,
)

SUITE = "dmatest"
DEFAULT_TABLE = "ddr-to-ddr-block-copy"
_SIZE = Pattern(r"test_buf_size\s*[:=]\s*(\d+)\s*$", "test_buf_size")
_SUMMARY = Pattern(
    r"dmatest: (?P<thread>\S+): summary (?P<tests>\d+) tests?, (?P<failures>\d+) failures? "
    r"(?P<iops>[\d.]+) iops (?P<kbs>\d+) KB/s \((?P<ret>-?\d+)\)", "dmatest: ")
_CLASS = re2.compile(r"^[a-z][a-z0-9]*$")


def check(params: dict[str, str]) -> str | None:
    """What is wrong with the parameters, checked at admission too; None when they are fine."""
    if problem := table_problem(params):
        return problem
    cls = params.get("channelClass", "nc")
    if not _CLASS.match(cls):
        return f"channelClass {cls!r} is not a channel class's short name (e.g. nc, hc, uhc)"
    size = params.get("bufferSize", "1")
    if count_parameter(size) is None:
        return f"bufferSize {size!r} is not a number of bytes"
    return None


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    params = params or {}
    if problem := check(params):
        raise ParseError(SUITE, problem)
    size = count_parameter(params["bufferSize"]) if "bufferSize" in params else None
    by_size: dict[int, list[tuple[float, float]]] = {}     # bytes -> (KiB/s, iops) per thread
    for i, line in enumerate(lines_of(text), 1):
        if m := _SIZE.search(line):
            size = integer(m.group(1), SUITE, i)
            continue
        m = _SUMMARY.search(line)
        if not m:
            continue
        if integer(m.group("failures"), SUITE, i) or integer(m.group("ret"), SUITE, i):
            raise ParseError(SUITE, f"{m.group('thread')}: {m.group('failures')} of "
                             f"{m.group('tests')} copies failed (result {m.group('ret')})", line=i)
        if size is None:
            raise ParseError(SUITE, "a summary before any buffer size: print test_buf_size "
                             "before each run, or give parameters.bufferSize", line=i)
        iops = number(m.group("iops"), SUITE, i)
        if iops <= 0:
            raise ParseError(SUITE, f"{m.group('thread')}: no copy finished", line=i)
        by_size.setdefault(size, []).append((number(m.group("kbs"), SUITE, i), iops))
    if not by_size:
        raise ParseError(SUITE, "no 'dmatest: <thread>: summary' line; load dmatest and run it")
    table, cls = params.get("table", DEFAULT_TABLE), params.get("channelClass", "nc")
    out = []
    for size, threads in sorted(by_size.items()):
        kib = f"{size / 1024:g}"
        prefix = f"dmatest-{table}-{kib}-{cls}"
        out.append(Metric(f"{prefix}-throughput", round(sum(k for k, _ in threads) / 1024, 2),
                          "MiB/s"))
        out.append(Metric(f"{prefix}-latency",
                          round(sum(1e6 / iops for _, iops in threads) / len(threads), 2), "us",
                          False))
    return out
