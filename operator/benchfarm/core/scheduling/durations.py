"""Durations in the Kubernetes form (`90m`, `2h`, `1h30m`, `45s`), as a BoardLease states its own.

The CRD's pattern admits exactly what `parse` reads, so a lease the API server stored always has a
duration the operator and the `benchfarm lease` command understand alike. No I/O here.
"""

from __future__ import annotations

import re

from benchfarm.api.leases import (
    DURATION_PATTERN as PATTERN,  # hours, minutes, seconds, in that order
)

_RE = re.compile(PATTERN)


def parse(text: str) -> int:
    """Seconds of a duration like `90m`, `2h`, `1h30m`; ValueError for anything else or zero."""
    m = _RE.match(text.strip())
    if not text.strip() or m is None:
        raise ValueError(f"not a duration: {text!r} (write it like 90m, 2h or 1h30m)")
    seconds = int(m.group(2) or 0) * 3600 + int(m.group(4) or 0) * 60 + int(m.group(6) or 0)
    if seconds <= 0:
        raise ValueError(f"a duration must be longer than zero: {text!r}")
    return seconds


def format_seconds(seconds: int) -> str:
    """The shortest form `parse` reads back to the same seconds: 5400 -> 1h30m."""
    h, rest = divmod(max(0, int(seconds)), 3600)
    m, s = divmod(rest, 60)
    out = (f"{h}h" if h else "") + (f"{m}m" if m else "") + (f"{s}s" if s else "")
    return out or "0s"
