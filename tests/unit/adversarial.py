"""Adversarial board output for the parsers, and the time checks the property suites make with it.

What a board prints is a tenant's: a parser must take it in time linear in its length. The text
here is built from each parser's own shapes: its seed lines (real outputs in tests/data/samples,
and the lines below for the suites that have none there), each with one run of digits, spaces,
letters or punctuation grown to n characters, with and without a stray character at the end: the
near-matches that make a backtracking pattern try every split of the run (cyclictest's histogram
row took 1.9 s on `000000` + 16,000 spaces + `x`, four times as long at each doubling).

`check_linear` measures a parse at n and 4n and fails when the time grows faster than n^1.5
(linear is 1, a quadratic pattern 2).
"""

from __future__ import annotations

import functools
import gc
import importlib
import math
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from benchfarm.errors import ParseError
from benchfarm.suites import registry
from tests.conftest import SAMPLES

# suites whose samples are under another name
SAMPLE_DIRS = {"fps": "glmark2", "console-timing": "mcu-latency"}
# the parameters a suite needs to read its output at all
PARAMS = {"console-timing": {"clockMHz": "200"}, "lmbench": {"tool": "bw_mem", "op": "bcopy"}}
# Lines of each pattern the samples do not show (the suites' docstrings and unit tests).
SEEDS: dict[str, list[str]] = {
    "alsa": ["rate=44100 bytes=1764000 seconds=10 cpu=1.5", '"48000","1535980.91","0.75"'],
    "boot-time": ["kernel=1.25", "userspace = 3.5"],
    "console-timing": ["LOG_event    30", "  TSK_yield 232"],
    "coremark": ["Iterations/Sec   : 6153.846154", "Correct operation validated."],
    "cyclictest": ["T: 0 ( 1234) P:99 I:1000 C:   5000 Min:      7 Act:   12 Avg:   38 Max:   28792",
                   "000097 000002 000002", "# Max Latencies: 08600 03323"],
    "dd": ["1280+0 records out", "131072000 bytes (131 MB, 125 MiB) copied, 1.2 s, 109 MB/s",
           "131072000 bytes (125.0MB) copied, 1.200 seconds, 104.2MB/s", "real 0m1.20s",
           "user 0.01", "sys 0.75"],
    "dhrystone": ["Dhrystones per Second:                      11764706.0"],
    "dmatest": ["test_buf_size:1024",
                "dmatest: dma0chan0-copy0: summary 10000 tests, 0 failures 78864.35 iops 78868 "
                "KB/s (0)"],
    "fps": ["[build] use-vbo=false: FPS: 560 FrameTime: 1.786 ms", "glmark2 Score: 312",
            "Kanzi cluster demo: 58.7 fps", "Average FPS: 58.7"],
    "hackbench": ["Running in process mode with 10 groups using 40 file descriptors each",
                  "Time: 0.532"],
    "iperf3": ["[  5]   0.00-10.00  sec  1.10 GBytes   941 Mbits/sec    0             sender",
               "[SUM]   0.00-2.00   sec  2.5 MBytes  10.5 Mbits/sec  0.012 ms  0/1812 (0%)  "
               "receiver", "iperf3: error - unable to connect to server"],
    "linpack": ["     128   0.55  85.71%   2.86%  11.43%  150000.000"],
    "lmbench": ['"size=128k ovr=1.23', "2 3.45", "Simple syscall: 0.1234 microseconds",
                "Simple read: 0.2 microseconds", "Simple write: 0.2 microseconds",
                "Simple stat: 0.9 microseconds", "Simple fstat: 0.3 microseconds",
                "Simple open/close: 1.9 microseconds", "Pipe latency: 10.5 microseconds",
                "AF_UNIX sock stream latency: 12.5 microseconds",
                "Process fork+exit: 250.1 microseconds", "Process fork+execve: 800 microseconds",
                "Process fork+/bin/sh -c: 1900 microseconds",
                "Procedure call: 0.005 microseconds",
                "Signal handler installation: 0.4 microseconds",
                "Signal handler overhead: 2.1 microseconds",
                "Protection fault: 0.7 microseconds",
                "Pagefaults on /tmp/x: 0.3 microseconds",
                "Select on 100 tcp fd's: 3.5 microseconds", "Semaphore latency: 1.5 microseconds",
                "TCP latency using localhost: 30.2 microseconds",
                "TCP/IP connection cost to localhost: 60.1 microseconds",
                "Pipe bandwidth: 900.5 MB/sec", "AF_UNIX sock stream bandwidth: 1200 MB/sec",
                "int64 add: 0.42 nanoseconds", '"stride=64', "0.00049 1.25"],
    "mbw": ["AVG     Method: MEMCPY  Elapsed: 0.01264        MiB: 64.00000       Copy: 5063.291 "
            "MiB/s"],
    "multibench": ["-- 4M-check: 280.25 workloads/s", "4m-check 280.25"],
    "ne10": ["----------test_fft_c2c_1d_float32_performance start",
             "              1024                 810                 225              72.22%     "
             "         3.60:1"],
    "netperf": ["THROUGHPUT=941.23", "THROUGHPUT_UNITS=10^6bits/s", "PROTOCOL=TCP",
                "LOCAL_CPU_UTIL=67.11"],
    "sevenzip": [],
    "stream": ["Copy:           12345.6     0.013082     0.012960     0.013307"],
    "stress-ng": ["stress-ng: metrc: [1234] cpu 12000 10.00 9.90 0.05 1200.00 1206.03"],
    "sysbench": ["events per second:  1234.56", "Latency (ms):", "min: 0.81",
                 "95th percentile: 0.83", "Total operations: 1048576 (1234567.89 per second)",
                 "102400.00 MiB transferred (12345.67 MiB/sec)"],
    "whetstone": ["Loops: 10000, Iterations: 1, Duration: 3 sec. C Converted Double Precision "
                  "Whetstones: 3333.3 MIPS"],
}
_RUN = re.compile(r"\d+|[ \t]+|[A-Za-z]+|[^\dA-Za-z \t]+")   # disjoint classes: linear
MAX_RUNS = 16          # runs grown per seed line (the first ones: a row's key and its numbers)
MAX_SEEDS = 48         # seed lines per suite


@functools.cache
def sample_lines(suite: str) -> list[str]:
    folder = SAMPLES / SAMPLE_DIRS.get(suite, suite)
    files = sorted(folder.iterdir()) if folder.is_dir() else []
    return [line for f in files for line in f.read_text(errors="replace").splitlines()]


def patterns(suite: str) -> list[Any]:
    """The compiled patterns a parser's module keeps (alone, or in a list of tuples)."""
    module = importlib.import_module(registry.parser(suite).__module__)

    def found(value: Any) -> Iterator[Any]:
        if hasattr(value, "pattern") and hasattr(value, "search"):
            yield value
        elif isinstance(value, (list, tuple)):
            for item in value:
                yield from found(item)
    return [p for name, value in vars(module).items() if not name.startswith("__")
            for p in found(value)]


@functools.cache
def seed_lines(suite: str) -> list[str]:
    """The SEEDS and distinct sample lines that match one of the parser's patterns (each
    pattern's first ones; all of them for a parser without patterns), at most MAX_SEEDS."""
    rxs = patterns(suite)
    mine = [line for other in registry.names() if registry.parser(other) is registry.parser(suite)
            for line in SEEDS.get(other, [])]     # glmark2 and fps share a parser, and its seeds
    lines = list(dict.fromkeys(s for s in (line.strip() for line in
                                           mine + sample_lines(suite)) if s))
    chosen = mine + ([] if rxs else lines)    # a JSON parser: its lines
    for rx in rxs:
        chosen += [s for s in lines if rx.search(s)][:3]
    return list(dict.fromkeys(chosen))[:MAX_SEEDS]


Family = tuple[str, int, int]     # (seed line, which run, which variant)


def _families(line: str) -> list[Family]:
    return [(line, r, v) for r in range(min(MAX_RUNS, len(_RUN.findall(line)))) for v in range(4)]


def _family(family: Family, n: int) -> str:
    line, r, v = family
    m = list(_RUN.finditer(line))[r]
    run = (m.group() * (n // len(m.group()) + 1))[:n]
    head, tail = line[:m.start()], line[m.end():]
    return (head + run + tail, head + run + tail + "x", head + run, head + run + "x")[v]


@functools.cache
def accepted(suite: str) -> tuple[Family, ...]:
    """The grown lines the parser reads without a ParseError at n=64 (those it refuses stop
    the parse at once, and would leave the lines after them unread)."""
    seeds = "\n".join(seed_lines(suite)) + "\n"
    return tuple(f for s in seed_lines(suite) for f in _families(s)
                 if not isinstance(run_parser(suite, seeds + _family(f, 64) + "\n"), ParseError))


def grown(line: str, n: int) -> list[str]:
    """The line with each of its first runs grown to n characters, with and without a stray
    character after it; and the line cut after that run, grown."""
    return [_family(f, n) for f in _families(line)]


def near_matches(suite: str, n: int) -> str:
    """The seed lines, repeated so that their count grows with n, then each grown line the
    parser accepts, grown to n characters."""
    seeds = seed_lines(suite)
    lines = seeds * max(1, n // 16) + [_family(f, n) for f in accepted(suite)]
    return "\n".join(lines) + "\n"


def pattern_lines(rx: Any, suite: str) -> Callable[[int], list[str]]:
    """The near-matches of one pattern: the first four of the suite's seed lines it matches,
    each grown."""
    seeds = ([s for s in seed_lines(suite) if rx.search(s)] or seed_lines(suite))[:4]
    return lambda n: [g for s in seeds for g in grown(s, n)]


def run_parser(suite: str, text: str) -> Any:
    """The parse of `text` as a session makes it: metrics, or a ParseError naming the problem."""
    try:
        return registry.parse(suite, text, PARAMS.get(suite, {}))
    except ParseError as exc:
        return exc


@dataclass(frozen=True)
class Growth:
    n: int
    seconds: float          # at n
    seconds_4n: float       # at 4n
    size_4n: int            # characters of the text at 4n

    @property
    def exponent(self) -> float:
        return math.log(max(self.seconds_4n, 1e-9) / max(self.seconds, 1e-9)) / math.log(4)


def _size(text: Any) -> int:
    return len(text) if isinstance(text, str) else sum(map(len, text))


def _best(parse: Callable[[Any], object], text: Any, repeat: int) -> float:
    """The least of `repeat` timings in CPU time of this process (the other processes of a
    loaded machine do not lengthen it, as they do wall time), the garbage collector off: its
    full collections walk every object alive, so a parse's many metrics would make a linear
    parse look faster than linear in time."""
    best = math.inf
    gc.disable()
    try:
        for _ in range(repeat):
            start = time.process_time()
            parse(text)
            best = min(best, time.process_time() - start)
    finally:
        gc.enable()
    return best


LEAST_SECONDS = 0.04    # below this a timing is mostly noise: the text is grown until it is
MAX_EXPONENT = 1.5      # linear is 1, quadratic 2


def growth(parse: Callable[[Any], object], text_of: Callable[[int], Any], *, start: int = 64,
           largest: int = 2 << 20, repeat: int = 2) -> Growth:
    """How parse time grows with n: n doubled from `start` until one parse takes LEAST_SECONDS
    (or the text reaches `largest` characters), then the best of `repeat` at n and at 4n."""
    n = start
    while True:
        text = text_of(n)
        seconds = _best(parse, text, 1)
        if seconds >= LEAST_SECONDS or _size(text) >= largest or n >= largest:
            break
        n *= 2
    seconds = min(seconds, _best(parse, text, repeat))
    text4 = text_of(4 * n)
    seconds_4n = _best(parse, text4, 1)
    if seconds_4n < 10 * LEAST_SECONDS:      # a longer time is not noise: taken once
        seconds_4n = min(seconds_4n, _best(parse, text4, repeat - 1))
    return Growth(n, seconds, seconds_4n, _size(text4))


def _fine(g: Growth) -> bool:
    return g.seconds < LEAST_SECONDS / 4 or g.exponent <= MAX_EXPONENT


def check_linear(parse: Callable[[Any], object], text_of: Callable[[int], Any], what: str,
                 largest: int = 1 << 20) -> Growth:
    """Raise AssertionError when parse time grows faster than n^MAX_EXPONENT, measured a second
    time (from where the first ended) so that a loaded machine's noise in a few tens of
    milliseconds is not taken for it. A parse that takes under LEAST_SECONDS / 4 at n (its text
    then `largest` characters or more) is too fast to judge, and fast enough."""
    g = growth(parse, text_of, largest=largest)
    if _fine(g):
        return g
    g = growth(parse, text_of, start=g.n, largest=largest)
    if _fine(g):
        return g
    raise AssertionError(
        f"{what}: {g.seconds:.3f} s at n={g.n}, {g.seconds_4n:.3f} s at 4n "
        f"({g.size_4n} characters): time grows as n^{g.exponent:.2f}, not linearly")
