"""What every parser returns: metrics with a name, a value and a normalised unit.

A metric's identity is its name plus its normalised unit: the seeds write `(mb/s)` in one guide
and `(MB/s)` in another, and those are the same metric.

The text every parser reads is what a tenant's board printed: parsers match it with RE2 (`re2`),
whose time is linear in the text whatever the pattern (Python's `re` backtracks: cyclictest's
histogram row took 1.9 s on one line of 16,000 spaces, four times as long at each doubling), and
turn what they match into numbers with `number` and `integer`, which raise a ParseError naming
the line for what is no figure (inf, nan, an integer of more digits than a count has).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import re2

from benchfarm.errors import ParseError

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


_TABLE = re2.compile(r"^[a-z0-9_](?:[a-z0-9_.-]*[a-z0-9_])?$")


def table_problem(params: dict[str, str]) -> str | None:
    """parameters.table names the guide table a step's figures go to: its title slugged (lower
    case, digits, `_ . -`, as core.guides.cells slugs a title), so the name import-guide gives a
    cell of that table, or of the report's, is the step's. None when absent or fine."""
    table = params.get("table")
    if table is None or (_TABLE.match(table) and "--" not in table):
        return None
    return (f"table {table!r} is not a guide table's slugged title (lower-case letters, digits, "
            "'_', '.' and single '-', e.g. emmc-ext4)")


class Pattern:
    """An RE2 pattern and the literals one of which every match contains: a line with none of
    them is not handed to RE2, whose call from Python costs microseconds where a substring test
    costs nanoseconds (a megabyte of short lines through 27 patterns was 36 s, linear but slow)."""

    def __init__(self, regex: str, *needles: str) -> None:
        self.regex = re2.compile(regex)
        self.pattern: str = regex
        self.needles = needles

    def _worth(self, text: str) -> bool:
        for needle in self.needles:
            if needle in text:
                return True
        return not self.needles

    def match(self, text: str) -> Any:
        return self.regex.match(text) if self._worth(text) else None

    def search(self, text: str) -> Any:
        return self.regex.search(text) if self._worth(text) else None


_NOT_SLUG = re2.compile(r"[^a-z0-9_.]+")
_VT100 = re2.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# every character str.isspace() calls a space (Python's `\s`) but the line break: a space
_SPACES = {c: " " for c in range(0x3001) if chr(c).isspace() and chr(c) not in "\n\r\t "}
MAX_DIGITS = 18     # an integer a tool prints (a count, a size): 10^18 is past any board's


def slug(text: str) -> str:
    """A title or label as a metric name's part: lower case, runs of anything but letters, digits,
    '_' and '.' one '-' ('R5F WKUP TCM' -> 'r5f-wkup-tcm'); core.guides.cells names cells so too."""
    dashed: str = _NOT_SLUG.sub("-", text.lower())
    return dashed.strip("-.")


def metric_key(name: str, unit: str) -> str:
    return f"{name} ({normalize_unit(unit)})"


def number(text: str, suite: str, line: int | None = None) -> float:
    """A figure: a finite float (a tool's 'inf' or 'nan', or 400 digits, is no measurement)."""
    try:
        value = float(text)
    except ValueError as exc:
        raise ParseError(suite, f"expected a number, found {text[:80]!r}", line=line) from exc
    if not math.isfinite(value):
        raise ParseError(suite, f"expected a finite number, found {text[:80]!r}", line=line)
    return value


def integer(text: str, suite: str, line: int | None = None) -> int:
    """A count or a size: decimal digits (a sign allowed), at most MAX_DIGITS of them."""
    digits = text.removeprefix("-")
    if not digits.isascii() or not digits.isdigit() or len(digits) > MAX_DIGITS:
        raise ParseError(suite, f"expected an integer of at most {MAX_DIGITS} digits, found "
                                f"{text[:80]!r}", line=line)
    return int(text)


def count_parameter(value: str) -> int | None:
    """A plan's parameter that is a positive count (bytes, reads, transforms): its value, None
    when it is no such count (checked at admission, so a parse never meets one)."""
    if not value.isascii() or not value.isdigit() or len(value) > MAX_DIGITS or int(value) < 1:
        return None
    return int(value)


def lines_of(text: str) -> list[str]:
    """The lines a person would read: serial consoles add \\r and VT100 sequences; a guide copied
    from a web page or PDF has no-break and other Unicode spaces, which RE2's `\\s` (ASCII, as
    its `\\d` and `\\w`) does not match, so they become plain spaces, as do vertical tabs and
    form feeds: a line holds no space but ' ' and tab (what Pattern's literals may count on)."""
    if "\x1b" in text:
        text = _VT100.sub("", text)
    if not text.isascii() or "\x0b" in text or "\x0c" in text:
        text = text.translate(_SPACES)
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
