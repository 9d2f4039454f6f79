"""dd: throughput from the final status line (busybox and GNU coreutils), in MB/s.

With `parameters: {table: emmc-ext4, direction: read}` the figures go to a guide's storage table
(TI's "EMMC EXT4": throughput and CPU load by buffer size): `dd-<table>-<bs>-<direction>-throughput`
and, when the command ran under `time -p` (or a shell's `time`), `-cpu-load`, (user + sys) / real.
The buffer size is `parameters.bs`, else the bytes copied over the whole records ("1280+0 records
out"); direction is `write` unless the plan says `read`.
"""

from __future__ import annotations

import re2

from benchfarm.errors import ParseError
from benchfarm.suites.base import Metric, Pattern, integer, lines_of, number, table_problem

SUITE = "dd"
_SCALE = {"B/s": 1e-6, "kB/s": 1e-3, "KB/s": 1e-3, "MB/s": 1.0, "GB/s": 1e3,
          "KiB/s": 1.024e-3, "MiB/s": 1.048576, "GiB/s": 1073.741824}
_GNU = Pattern(r"copied,\s*([\d.]+)\s*s,\s*([\d.]+)\s*([kKMG]?i?B/s)", "copied,")
_BUSYBOX = Pattern(r"\(([\d.]+)([kKMG]?i?B)\) copied,\s*([\d.]+)\s*seconds,\s*([\d.]+)([kKMG]?i?B/s)", "copied,")
_RECORDS = Pattern(r"^(\d+)\+(\d+) records out$", "records out")
_BYTES = Pattern(r"^(\d+) bytes\b", " bytes")
_BS = re2.compile(r"^\d+[kmg]?$")
_TIME = Pattern(r"^(real|user|sys)\s+(?:(\d+)m)?([\d.]+)s?$", "real", "user", "sys")   # time -p, or bash's 0m0.75s


def check(params: dict[str, str]) -> str | None:
    """What is wrong with the parameters, checked at admission too; None when they are fine."""
    if params.get("direction", "write") not in ("write", "read"):
        return f"direction is {params['direction']!r}; write or read"
    if not _BS.match(params.get("bs", "0")):
        return f"bs is {params['bs']!r}; bytes, or a number with k, m or g (4k, 1m)"
    return table_problem(params)


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    params = params or {}
    if problem := check(params):
        raise ParseError(SUITE, problem)
    lines = lines_of(text)
    rate = _rate(lines)
    table = params.get("table")
    if not table:
        return [Metric("dd-throughput", rate, "MB/s")]
    direction = params.get("direction", "write")
    name = f"dd-{table}-{params.get('bs') or _block_size(lines)}-{direction}"
    out = [Metric(f"{name}-throughput", rate, "MB/s")]
    if (load := _cpu_load(lines)) is not None:
        out.append(Metric(f"{name}-cpu-load", load, "%", False))
    return out


def _rate(lines: list[str]) -> float:
    for line in reversed(lines):
        if m := _GNU.search(line):
            return round(number(m.group(2), SUITE) * _SCALE[m.group(3)], 3)
        if m := _BUSYBOX.search(line):
            return round(number(m.group(4), SUITE) * _SCALE[m.group(5)], 3)
    raise ParseError(SUITE, "no '... copied, N s, R MB/s' line")


def _block_size(lines: list[str]) -> str:
    records = [m for line in lines if (m := _RECORDS.match(line.strip()))]
    copied = [m for line in lines if (m := _BYTES.match(line.strip()))]
    if records and copied and records[-1].group(2) == "0" and \
            (whole := integer(records[-1].group(1), SUITE)):
        return str(integer(copied[-1].group(1), SUITE) // whole)
    raise ParseError(SUITE, "cannot tell the buffer size from whole records and bytes copied; "
                            "give it as parameters.bs")


def _cpu_load(lines: list[str]) -> float | None:
    """(user + sys) / real in %, from `time -p` (or bash's `time`) lines; None without them."""
    seconds = {}
    for line in lines:
        if m := _TIME.match(line.strip()):
            seconds[m.group(1)] = 60 * integer(m.group(2) or "0", SUITE) + number(m.group(3), SUITE)
    if len(seconds) < 3 or not seconds["real"]:
        return None
    return round(100 * (seconds["user"] + seconds["sys"]) / seconds["real"], 2)
