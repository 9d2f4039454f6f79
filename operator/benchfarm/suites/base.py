"""What every parser returns: metrics with a name, a value and a normalised unit.

A metric's identity is its name plus its normalised unit: the seeds write `(mb/s)` in one guide
and `(MB/s)` in another, and those are the same metric.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import ParseError

_UNIT_ALIASES = {
    "mb/s": "MB/s", "mbps": "Mbit/s", "mbit/s": "Mbit/s", "gbit/s": "Gbit/s", "kb/s": "KB/s",
    "gb/s": "GB/s", "us": "us", "µs": "us", "μs": "us", "usec": "us", "microseconds": "us", "ns": "ns",
    "ms": "ms", "s": "s", "sec": "s", "seconds": "s", "mips": "MIPS", "dmips/mhz": "DMIPS/MHz",
    "kflops": "KFLOPS", "mflops": "MFLOPS", "iops": "IOPS", "fps": "FPS", "mw": "mW", "v": "V",
    "": "", "ops/s": "ops/s", "bogo ops/s": "bogo ops/s", "events/s": "events/s", "mib/s": "MiB/s",
    "kib/s": "KiB/s", "mhz": "MHz", "%": "%", "cycles": "cycles", "score": "",
    "dhrystonep": "DhrystoneP", "microsec": "us", "nanosec": "ns", "mb\\s": "MB/s",
    "iter/s": "iter/s", "bits/s": "bits/s", "bits/sec": "bits/s", "workloads/": "workloads/",
    "iterations": "iterations",
    "mbits/sec": "Mbit/s", "mbytes/sec": "MB/s", "mb/sec": "MB/s", "kbytes/sec": "KB/s",
    "kpps": "kPPS", "bytes": "bytes",
}


def normalize_unit(unit: str) -> str:
    u = unit.strip().strip("()").strip()
    return _UNIT_ALIASES.get(u.lower(), u)


@dataclass(frozen=True)
class Metric:
    name: str
    value: float
    unit: str = ""
    higher_is_better: bool = True
    labels: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "unit", normalize_unit(self.unit))

    @property
    def key(self) -> str:
        """'name (unit)': the identity used in tables and comparisons."""
        return f"{self.name} ({self.unit})"

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "value": self.value, "unit": self.unit,
                             "higherIsBetter": self.higher_is_better}
        if self.labels:
            d["labels"] = dict(self.labels)
        return d


_TABLE = re.compile(r"^[a-z0-9_](?:[a-z0-9_.-]*[a-z0-9_])?$")


def table_problem(params: dict[str, str]) -> str | None:
    """parameters.table names the guide table a step's figures go to: its title slugged (lower
    case, digits, `_ . -`, as core.guide_cells slugs a title), so the name import-guide gives a
    cell of that table, or of the report's, is the step's. None when absent or fine."""
    table = params.get("table")
    if table is None or (_TABLE.match(table) and "--" not in table):
        return None
    return (f"table {table!r} is not a guide table's slugged title (lower-case letters, digits, "
            "'_', '.' and single '-', e.g. emmc-ext4)")


def slug(text: str) -> str:
    """A title or label as a metric name's part: lower case, runs of anything but letters, digits,
    '_' and '.' one '-' ('R5F WKUP TCM' -> 'r5f-wkup-tcm'); core.guide_cells names cells so too."""
    return re.sub(r"[^a-z0-9_.]+", "-", text.lower()).strip("-.")


def metric_key(name: str, unit: str) -> str:
    return f"{name} ({normalize_unit(unit)})"


def number(text: str, suite: str, line: int | None = None) -> float:
    try:
        return float(text)
    except ValueError as exc:
        raise ParseError(suite, f"expected a number, found {text!r}", line=line) from exc


def lines_of(text: str) -> list[str]:
    # serial consoles add \r and VT100 sequences; keep the text a person would read
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    return text.replace("\r", "").split("\n")


def json_object(text: str, suite: str, hint: str) -> dict[str, Any]:
    """The first JSON object in a tool's output (consoles may print lines before it)."""
    start = text.find("{")
    if start < 0:
        raise ParseError(suite, f"no JSON object in the output; {hint}")
    try:
        data, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as exc:
        raise ParseError(suite, f"invalid JSON: {exc.msg}",
                         line=text[:start].count("\n") + exc.lineno) from exc
    if not isinstance(data, dict):
        raise ParseError(suite, "JSON output is not an object")
    return data
