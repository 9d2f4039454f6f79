"""dd: throughput from the final status line (busybox and GNU coreutils), in MB/s."""

from __future__ import annotations

import re

from ..errors import ParseError
from .base import Metric, lines_of, number

SUITE = "dd"
_SCALE = {"B/s": 1e-6, "kB/s": 1e-3, "KB/s": 1e-3, "MB/s": 1.0, "GB/s": 1e3,
          "KiB/s": 1.024e-3, "MiB/s": 1.048576, "GiB/s": 1073.741824}
_GNU = re.compile(r"copied,\s*([\d.]+)\s*s,\s*([\d.]+)\s*([kKMG]?i?B/s)")
_BUSYBOX = re.compile(r"\(([\d.]+)([kKMG]?i?B)\) copied,\s*([\d.]+)\s*seconds,\s*([\d.]+)([kKMG]?i?B/s)")


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    for i, line in enumerate(reversed(lines_of(text))):
        if m := _GNU.search(line):
            rate, unit = number(m.group(2), SUITE), m.group(3)
            return [Metric("dd-throughput", round(rate * _SCALE[unit], 3), "MB/s")]
        if m := _BUSYBOX.search(line):
            rate, unit = number(m.group(4), SUITE), m.group(5)
            return [Metric("dd-throughput", round(rate * _SCALE[unit], 3), "MB/s")]
    raise ParseError(SUITE, "no '... copied, N s, R MB/s' line")
