"""Vendor performance guides as baselines: every `.. csv-table::` of an RST guide, cell by cell.

TI's guides put one column per board (`"am62xx_sk-fs: perf"`), several value columns per row
(throughput and CPU load, write and read), label columns before them (algorithm, buffer size),
and values as `785.15 (min 707.87, max 861.19)`, a plain number, `34%`, `~11.04`, or one
number per core (`"6,6"`). This module finds the tables and reads each numeric cell with its board;
`guide_cells` says which cells are values and gives each the metric name our suites emit, so
`compare` lines them up.
A table none of whose cells can be read is reported by title, never dropped silently; the
guide's board table (Evaluation Modules, `Name | Description`: what each board is and ran at, no
figure to compare) is none of the benchmark tables, whether a grid table as the vendors' and
benchfarm's guides write it (not a csv-table, so never read) or a csv-table.
Pure text in, data out.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field

import re2

from benchfarm.core.guides.cells import value_cells
from benchfarm.errors import BenchfarmError

# A guide is any vendor's file, or a tenant's: RE2 reads its cells in time linear in their length
# (Python's re took minutes on a cell of a few thousand spaces), matched on the cell with its
# spaces made single ASCII ones, so RE2's ASCII `\s` sees every space Python's did
_VALUE = re2.compile(r"^ ?~? ?(-?[\d.]+) ?(%?) ?(?:\(min ?(-?[\d.]+), ?max ?(-?[\d.]+)\))? ?$")
SHOWN = 80      # characters of a cell a problem quotes: a cell may be megabytes
_UNDERLINE_CHARS = frozenset("=-~^\"'`#*+")
MODULES_HEADER = ("name", "description")      # the board table's header, as the vendors'


class GuideError(BenchfarmError):
    """A guide that cannot serve as the baseline asked for (e.g. no such board in it)."""

    reason = "GuideBoard"


@dataclass(frozen=True)
class GuideValue:
    mean: float
    min: float
    max: float
    text: str

    @property
    def has_range(self) -> bool:
        return self.min != self.max


@dataclass(frozen=True)
class CsvTable:
    """One `csv-table` as written: its title (or caption, or section), header and rows."""

    title: str
    header: list[str]
    rows: list[list[str]]
    line: int


@dataclass(frozen=True)
class GuideRow:
    """One number of a guide: which board, which metric, and the cell it came from."""

    board: str
    name: str
    unit: str
    value: GuideValue
    cell: tuple[int, int, int]     # (csv-table, row, column), counted from 0, header excluded

    @property
    def key(self) -> str:
        return f"{self.name} ({self.unit})"


@dataclass
class GuideTable:
    title: str
    board: str
    rows: list[GuideRow] = field(default_factory=list)


@dataclass
class Guide:
    tables: list[GuideTable]
    problems: list[str]        # by table title: tables that gave no number, cells not read

    @property
    def boards(self) -> list[str]:
        return sorted({t.board for t in self.tables if t.board})

    def baseline(self, board: str | None = None) -> dict[str, GuideValue]:
        """metric key 'name (unit)' -> value for one board; tables naming no board count for
        every board. Later tables do not overwrite earlier ones."""
        boards = self.boards
        if board is None and len(boards) > 1:
            raise GuideError(f"the guide has {len(boards)} boards ({', '.join(boards)}): "
                             "pick one with --board")
        if board is not None and board not in boards:
            raise GuideError(f"the guide has no board {board!r}; it has: "
                             f"{', '.join(boards) or 'no named board'}")
        out: dict[str, GuideValue] = {}
        for t in self.tables:
            if board is None or t.board in ("", board):
                for row in t.rows:
                    out.setdefault(row.key, row.value)
        return out


def parse_value(text: str) -> GuideValue | None:
    m = _VALUE.match(" ".join(text.split()))
    if not m:
        return None
    try:
        mean = float(m.group(1))
        lo = float(m.group(3)) if m.group(3) else mean
        hi = float(m.group(4)) if m.group(4) else mean
    except ValueError:
        return None
    if not all(map(math.isfinite, (mean, lo, hi))):     # 400 digits are no figure to compare with
        return None
    return GuideValue(mean, lo, hi, text.strip())


def _underline(line: str) -> bool:
    """A section title's underline: one punctuation character, three times or more."""
    bare = line.rstrip()
    return len(bare) >= 3 and bare[0] in _UNDERLINE_CHARS and bare.count(bare[0]) == len(bare)


def _caption(line: str) -> str | None:
    """The caption a `Table:` line gives; None for any other line."""
    return line[len("Table:"):].strip() if line.startswith("Table:") else None


def _csv_line(text: str) -> list[str]:
    return next(csv.reader([text.strip()], skipinitialspace=True), [])


def csv_tables(text: str) -> list[CsvTable]:
    """Every csv-table in document order. Its title: the directive's argument, else a `Table:`
    caption written since the last section title, else that section title."""
    lines = text.splitlines()
    out: list[CsvTable] = []
    section, caption = "", ""
    i = 0
    while i < len(lines):
        line = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and not _underline(line) and _underline(nxt):
            section, caption = line.strip(), ""
        elif (said := _caption(line)) is not None:
            caption = said.strip("* ")
        if not line.strip().startswith(".. csv-table::"):
            i += 1
            continue
        start = i + 1
        title = line.split("::", 1)[1].strip() or caption or section
        caption = ""
        header: list[str] = []
        rows: list[list[str]] = []
        i += 1
        while i < len(lines) and (not lines[i].strip() or lines[i][:1] in " \t"):
            body = lines[i].strip()
            if body.startswith(":header:"):
                header = _csv_line(body[len(":header:"):])
            elif body and not body.startswith(":"):
                rows.append(_csv_line(body))
            i += 1
        out.append(CsvTable(title, header, rows, start))
    return out


def _rows(index: int, table: CsvTable) -> tuple[list[GuideRow], list[str]]:
    cells, problems = value_cells(table.title, table.header, table.rows)
    rows: list[GuideRow] = []
    for c in cells:
        value = parse_value(c.text)
        if value is None:
            shown = c.text if len(c.text) <= SHOWN else c.text[:SHOWN] + "..."
            problems.append(f"row {c.row + 1}, column {c.column + 1}: {shown!r} is not a number")
        else:
            rows.append(GuideRow(c.board, c.name, "%" if c.text.strip().endswith("%") else c.unit,
                                 value, (index, c.row, c.column)))
    return rows, problems


def read_guide(text: str) -> Guide:
    tables: list[GuideTable] = []
    problems: list[str] = []
    for index, table in enumerate(csv_tables(text)):
        if tuple(h.strip().lower() for h in table.header) == MODULES_HEADER:
            continue        # the boards described, no benchmark
        found, odd = _rows(index, table)
        title = table.title or f"table at line {table.line}"
        if not found:
            problems.append(f"{title}: not imported: {'; '.join(odd) or 'no numeric cell'}")
            continue
        problems += [f"{title}: {p}" for p in odd]
        by_board: dict[str, GuideTable] = {}
        for row in found:
            by_board.setdefault(row.board, GuideTable(table.title, row.board)).rows.append(row)
        tables += by_board.values()
    return Guide(tables, problems)
