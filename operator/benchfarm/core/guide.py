"""Vendor performance guides as baselines: read the `.. csv-table::` blocks of an RST guide.

A guide row is `"name (unit)","785.15 (min 707.87, max 861.19)"`, a plain number, or a bare
number; the board is in the header (`"Benchmarks","am654x-evm: perf"`). Pure text in, data out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..suites.base import normalize_unit

_VALUE = re.compile(r"^\s*(-?[\d.]+)\s*(?:\(min\s*(-?[\d.]+),\s*max\s*(-?[\d.]+)\))?\s*$")
_ROW = re.compile(r'^\s+"([^"]+)"\s*,\s*"?([^"]*)"?\s*$')
_NAME_UNIT = re.compile(r"^(.*?)\s*\(([^()]*)\)\s*$")
_HEADER = re.compile(r':header:\s*"[^"]*"\s*,\s*"([^"]*)"')


@dataclass(frozen=True)
class GuideValue:
    mean: float
    min: float
    max: float
    text: str

    @property
    def has_range(self) -> bool:
        return self.min != self.max


@dataclass
class GuideTable:
    title: str
    column: str
    rows: list[tuple[str, str, GuideValue]] = field(default_factory=list)  # name, unit, value

    @property
    def board(self) -> str:
        return self.column.split(":")[0].strip()


def parse_value(text: str) -> GuideValue | None:
    m = _VALUE.match(text)
    if not m:
        return None
    mean = float(m.group(1))
    lo = float(m.group(2)) if m.group(2) else mean
    hi = float(m.group(3)) if m.group(3) else mean
    return GuideValue(mean, lo, hi, text.strip())


def split_name(label: str) -> tuple[str, str]:
    m = _NAME_UNIT.match(label)
    if not m:
        return label.strip(), ""
    return m.group(1).strip(), normalize_unit(m.group(2))


def parse_rst(text: str) -> list[GuideTable]:
    lines = text.splitlines()
    tables: list[GuideTable] = []
    last_title = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if i + 1 < len(lines) and re.match(r"^[\^=~\-]{3,}\s*$", lines[i + 1]) and line.strip():
            last_title = line.strip()
        if line.strip().startswith(".. csv-table::"):
            title = line.split("::", 1)[1].strip() or last_title
            table = GuideTable(title=title, column="")
            i += 1
            while i < len(lines) and (lines[i].strip().startswith(":") or not lines[i].strip()):
                if m := _HEADER.search(lines[i]):
                    table.column = m.group(1)
                i += 1
                if i < len(lines) and _ROW.match(lines[i]):
                    break
            while i < len(lines) and (m := _ROW.match(lines[i])):
                value = parse_value(m.group(2))
                if value is not None:
                    name, unit = split_name(m.group(1))
                    table.rows.append((name, unit, value))
                i += 1
            if table.rows:
                tables.append(table)
            continue
        i += 1
    return tables


def as_baseline(tables: list[GuideTable]) -> dict[str, GuideValue]:
    """metric key 'name (unit)' -> value; later tables do not overwrite earlier ones."""
    out: dict[str, GuideValue] = {}
    for t in tables:
        for name, unit, value in t.rows:
            out.setdefault(f"{name} ({unit})", value)
    return out
