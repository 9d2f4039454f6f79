"""LMBench: bw_mem, lat_mem_rd, lat_ctx and the one-line latency tools, named as TI's guides do.

Most tools name themselves in their text ("Pipe latency: …"). bw_mem prints two bare numbers
(size in MB, MB/s), so the plan gives `tool: bw_mem` and `op: bcopy` (the command's arguments);
lat_mem_rd's stride comes from its own `"stride=` header.
"""

from __future__ import annotations

import re

from ..errors import ParseError
from .base import Metric, lines_of, number

SUITE = "lmbench"
_ONE_LINERS = [
    (re.compile(r"^Simple syscall:\s*([\d.]+) microseconds"), "lat_syscall-null", "us"),
    (re.compile(r"^Simple read:\s*([\d.]+) microseconds"), "lat_syscall-read", "us"),
    (re.compile(r"^Simple write:\s*([\d.]+) microseconds"), "lat_syscall-write", "us"),
    (re.compile(r"^Simple stat:\s*([\d.]+) microseconds"), "lat_syscall-stat", "us"),
    (re.compile(r"^Simple fstat:\s*([\d.]+) microseconds"), "lat_syscall-fstat", "us"),
    (re.compile(r"^Simple open/close:\s*([\d.]+) microseconds"), "lat_syscall-open", "us"),
    (re.compile(r"^Pipe latency:\s*([\d.]+) microseconds"), "lat_pipe", "us"),
    (re.compile(r"^AF_UNIX sock stream latency:\s*([\d.]+) microseconds"), "lat_unix", "us"),
    (re.compile(r"^Process fork\+exit:\s*([\d.]+) microseconds"), "lat_proc-fork", "us"),
    (re.compile(r"^Process fork\+execve:\s*([\d.]+) microseconds"), "lat_proc-exec", "us"),
    (re.compile(r"^Process fork\+/bin/sh -c:\s*([\d.]+) microseconds"), "lat_proc-shell", "us"),
    (re.compile(r"^Procedure call:\s*([\d.]+) microseconds"), "lat_proc-proccall", "us"),
    (re.compile(r"^Signal handler installation:\s*([\d.]+) microseconds"), "lat_sig-install", "us"),
    (re.compile(r"^Signal handler overhead:\s*([\d.]+) microseconds"), "lat_sig-catch", "us"),
    (re.compile(r"^Protection fault:\s*([\d.]+) microseconds"), "lat_sig-prot", "us"),
    (re.compile(r"^Pagefaults on \S+:\s*([\d.]+) microseconds"), "lat_pagefault", "us"),
    (re.compile(r"^Select on \d+ \S+ fd's:\s*([\d.]+) microseconds"), "lat_select", "us"),
    (re.compile(r"^Semaphore latency:\s*([\d.]+) microseconds"), "lat_sem", "us"),
    (re.compile(r"^TCP latency using \S+:\s*([\d.]+) microseconds"), "lat_tcp", "us"),
    (re.compile(r"^TCP/IP connection cost to \S+:\s*([\d.]+) microseconds"), "lat_connect", "us"),
    (re.compile(r"^Pipe bandwidth:\s*([\d.]+) MB/sec"), "bw_pipe", "MB/s"),
    (re.compile(r"^AF_UNIX sock stream bandwidth:\s*([\d.]+) MB/sec"), "bw_unix", "MB/s"),
]
_LAT_OPS = re.compile(r"^(int64|int|float|double|uint64)\s+(add|mul|div|mod|bit):\s*([\d.]+) nanoseconds")


def _size_label(mb: float) -> str:
    """TI's names: the size in MB times 1000, truncated ('sz62k' is 0.0625 MB)."""
    kb = mb * 1000
    return f"{int(kb)}k" if kb >= 1 else f"{int(round(mb * 1e6))}"


def _lat_mem_rd(text: str) -> list[Metric]:
    """Pairs after '"stride=N', whether one per line or flattened onto one line (as in a PDF)."""
    after = text[text.index('"stride=') + len('"stride='):]
    tokens = re.findall(r"-?\d+(?:\.\d+)?", re.split(r"[a-zA-Z#]{3,}", after, maxsplit=1)[0])
    if len(tokens) < 3:
        raise ParseError(SUITE, "lat_mem_rd: no size/latency pairs after 'stride='")
    stride, values = tokens[0], tokens[1:]
    if len(values) % 2:
        values = values[:-1]
    return [Metric(f"lat_mem_rd-stride{stride}-sz{_size_label(float(mb))}", float(ns), "ns", False,
                   {"size_mb": mb}) for mb, ns in zip(values[::2], values[1::2], strict=False)]


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
        if m := re.match(r'^"size=(\d+)k\s+ovr=', line):
            ctx_size = m.group(1)
            continue
        matched = False
        for rx, name, unit in _ONE_LINERS:
            if m := rx.match(line):
                out.append(Metric(name, number(m.group(1), SUITE, i), unit, unit == "MB/s"))
                matched = True
                break
        if matched:
            continue
        if m := _LAT_OPS.match(line):
            out.append(Metric(f"lat_ops-{m.group(1)}-{m.group(2)}", number(m.group(3), SUITE, i),
                              "ns", False))
            continue
        if m := re.match(r"^([\d.]+)\s+([\d.]+)$", line):
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
