"""LMBench: bw_mem, lat_mem_rd, lat_ctx and the one-line latency tools, named as TI's guides do.

Most tools name themselves in their text ("Pipe latency: …"). bw_mem prints two bare numbers
(size in MB, MB/s), so the plan gives `tool: bw_mem` and `op: bcopy` (the command's arguments);
lat_mem_rd's stride comes from its own `"stride=` header.
"""

from __future__ import annotations

import re2

from benchfarm.errors import ParseError
from benchfarm.suites.base import Metric, Pattern, lines_of, number

SUITE = "lmbench"
# (what the line starts with, as a pattern; the metric; its unit): `<what>: <figure> microseconds`
# or, for bandwidths, `MB/sec`
_ONE_LINER_LABELS = [
    (r"Simple syscall", "lat_syscall-null", "us"),
    (r"Simple read", "lat_syscall-read", "us"),
    (r"Simple write", "lat_syscall-write", "us"),
    (r"Simple stat", "lat_syscall-stat", "us"),
    (r"Simple fstat", "lat_syscall-fstat", "us"),
    (r"Simple open/close", "lat_syscall-open", "us"),
    (r"Pipe latency", "lat_pipe", "us"),
    (r"AF_UNIX sock stream latency", "lat_unix", "us"),
    (r"Process fork\+exit", "lat_proc-fork", "us"),
    (r"Process fork\+execve", "lat_proc-exec", "us"),
    (r"Process fork\+/bin/sh -c", "lat_proc-shell", "us"),
    (r"Procedure call", "lat_proc-proccall", "us"),
    (r"Signal handler installation", "lat_sig-install", "us"),
    (r"Signal handler overhead", "lat_sig-catch", "us"),
    (r"Protection fault", "lat_sig-prot", "us"),
    (r"Pagefaults on \S+", "lat_pagefault", "us"),
    (r"Select on \d+ \S+ fd's", "lat_select", "us"),
    (r"Semaphore latency", "lat_sem", "us"),
    (r"TCP latency using \S+", "lat_tcp", "us"),
    (r"TCP/IP connection cost to \S+", "lat_connect", "us"),
    (r"Pipe bandwidth", "bw_pipe", "MB/s"),
    (r"AF_UNIX sock stream bandwidth", "bw_unix", "MB/s"),
]
_ONE_LINERS = [
    # a line without the label's literal start (up to its first escape) is not handed to RE2
    (Pattern(rf"^{label}:\s*([\d.]+) {'MB/sec' if unit == 'MB/s' else 'microseconds'}",
             label.split("\\")[0]), name, unit)
    for label, name, unit in _ONE_LINER_LABELS]
_CTX_SIZE = Pattern(r'^"size=(\d+)k\s+ovr=', '"size=')
_BARE = Pattern(r"^([\d.]+)\s+([\d.]+)$", " ", "\t")
_TOKEN = re2.compile(r"-?\d+(?:\.\d+)?")
_WORD = re2.compile(r"[a-zA-Z#]{3,}")
_LAT_OPS = Pattern(r"^(int64|int|float|double|uint64)\s+(add|mul|div|mod|bit):\s*([\d.]+) nanoseconds", " nanoseconds")


def _size_label(mb: float) -> str:
    """TI's names: the size in MB times 1000, truncated ('sz62k' is 0.0625 MB)."""
    kb = mb * 1000
    if not abs(kb) < 1e18:
        raise ParseError(SUITE, f"lat_mem_rd: an array of {mb:g} MB is no size")
    return f"{int(kb)}k" if kb >= 1 else f"{int(round(mb * 1e6))}"


def _lat_mem_rd(text: str) -> list[Metric]:
    """Pairs after '"stride=N', whether one per line or flattened onto one line (as in a PDF)."""
    after = text[text.index('"stride=') + len('"stride='):]
    tokens = _TOKEN.findall(_WORD.split(after, maxsplit=1)[0])
    if len(tokens) < 3:
        raise ParseError(SUITE, "lat_mem_rd: no size/latency pairs after 'stride='")
    stride, values = tokens[0], tokens[1:]
    if len(values) % 2:
        values = values[:-1]
    return [Metric(f"lat_mem_rd-stride{stride}-sz{_size_label(number(mb, SUITE))}",
                   number(ns, SUITE), "ns", False, {"size_mb": mb})
            for mb, ns in zip(values[::2], values[1::2], strict=False)]


def _one_liner(line: str, i: int) -> Metric | None:
    for rx, name, unit in _ONE_LINERS:
        if m := rx.match(line):
            return Metric(name, number(m.group(1), SUITE, i), unit, unit == "MB/s")
    return None


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    params = params or {}
    if '"stride=' in text:
        return _lat_mem_rd(text)
    out: list[Metric] = []
    lines = lines_of(text)
    ctx_size = None
    bare: list[tuple[float, float]] = []
    for i, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line:
            continue
        if m := _CTX_SIZE.match(line):
            ctx_size = m.group(1)
            continue
        if ("microseconds" in line or "MB/sec" in line) and (one := _one_liner(line, i)):
            out.append(one)
            continue
        if m := _LAT_OPS.match(line):
            out.append(Metric(f"lat_ops-{m.group(1)}-{m.group(2)}", number(m.group(3), SUITE, i),
                              "ns", False))
            continue
        if m := _BARE.match(line):
            bare.append((number(m.group(1), SUITE, i), number(m.group(2), SUITE, i)))
            continue
    tool = params.get("tool")
    if ctx_size is not None:
        for procs, us in bare:
            out.append(Metric(f"lat_ctx-{int(procs)}-{ctx_size}k", us, "us", False))
    elif bare:
        if tool not in (None, "bw_mem"):
            raise ParseError(SUITE, f"bare numbers but tool={tool!r}; expected bw_mem")
        op = params.get("op")
        if not op:
            raise ParseError(SUITE, "bw_mem prints two bare numbers: the plan must give "
                                    "parameters tool=bw_mem and op=<bcopy|cp|rd|wr|...>")
        size, mbs = bare[-1]
        label = params.get("size") or f"{round(size)}mb"
        parallel = params.get("parallel")
        name = f"bw_mem-{op}-{label.lower()}" + (f"-p{parallel}" if parallel else "")
        out.append(Metric(name, mbs, "MB/s"))
    if not out:
        raise ParseError(SUITE, "no lmbench result line recognised")
    return out
