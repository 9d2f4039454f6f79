"""A run's figures in the table shapes of the vendors' performance guides, built once for every
output format: Markdown and RST (report.tables) and HTML (report.html) show the same tables.

Each shape uses the guide's own title and column labels, so a report and a guide lie side by side,
and core.guides.cells names every cell of it back to the metric it came from: a report imported as
a guide gives back each metric it was made from. Shapes, by what they gather:
- per step: OpenSSL by algorithm and buffer size; cyclictest per core (comma-joined per-thread
  figures, as the RT guides print them); iperf3 throughput and CPU load; rails with their Total,
  one table per mode, titled by the mode;
- across steps, by the guide table their metric names carry (one step per buffer size, direction
  or frame size): fio and dd by buffer size with write/read throughput and CPU load, netperf
  throughput and CPU load (by frame size for UDP);
- across steps too: Ne10's FFTs by length and direction, one table per FFT function; dmatest's
  copies by buffer size with each channel class's bandwidth and latency ("UDMA: DDR to DDR block
  copy"); memory access latency by memory target with a column per core (each core a
  console-timing step with `table: critical-memory-access-latency` and its `core`);
- the run's boot phases as the guides' boot-time table.
A series no shape takes stays in its step's generic "Benchmarks" table.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import re2

from benchfarm.suites.base import slug

Series = dict[str, Any]


@dataclass(frozen=True)
class Table:
    section: str            # the step it belongs to (the first one, for a table across steps)
    title: str              # as the guides title theirs; core.guides.cells reads names from it
    header: list[str]
    rows: list[list[str]]


@dataclass(frozen=True)
class Shaped:
    boot: Table | None
    tables: list[Table]                      # in step order
    rest: OrderedDict[str, list[Series]]     # step -> series no shape took


# numbers a shape turns into int have at most 18 digits (a longer one stays in the generic table)
_OPENSSL_SIZED = re2.compile(r"^openssl-(.+)-(\d{1,18})B$")
_PER_CORE = re2.compile(r"^cyclictest-t(\d{1,18})-(min|avg|max)$")
_LATENCY_ROWS = (("min", "Minimum (usec)"), ("avg", "Average (usec)"), ("max", "Maximum (usec)"))
_STORAGE = re2.compile(r"^(fio|dd)-(?P<table>.+)-(\d{1,18}[kmg]?)-(write|read)-(throughput|cpu-load)$")
_STORAGE_COLUMNS = (("write", "throughput", "Write Throughput (Mbytes/sec)"),
                    ("write", "cpu-load", "Write CPU Load (%)"),
                    ("read", "throughput", "Read Throughput (Mbytes/sec)"),
                    ("read", "cpu-load", "Read CPU Load (%)"))
_NETPERF = re2.compile(
    r"^netperf-(?P<table>.+?)(?:-(\d{2,18}))?-(throughput|local-cpu-util|remote-cpu-util)$")
_NETWORK_COLUMNS = (("throughput", "THROUGHPUT (Mbits/sec)"),
                    ("local-cpu-util", "CPU Load % (LOCAL_CPU_UTIL)"),
                    ("remote-cpu-util", "CPU Load % (REMOTE_CPU_UTIL)"))
_IPERF3_COLUMNS = (("iperf3-received", "THROUGHPUT (Mbits/sec)"),
                   ("iperf3-local-cpu-util", "CPU Load % (LOCAL_CPU_UTIL)"),
                   ("iperf3-remote-cpu-util", "CPU Load % (REMOTE_CPU_UTIL)"))
_STORAGE_UNITS = {"throughput": "MB/s", "cpu-load": "%"}
_NE10 = re2.compile(r"^ne10-(?P<table>.+)-(\d{1,18})-(forward|inverse)-(neon|c|neon-speed-up)$")
_NE10_COLUMNS = (("neon", "NEON (us)"), ("c", "C (us)"), ("neon-speed-up", "NEON speed-up (x)"))
_NE10_UNITS = {"neon": "us", "c": "us", "neon-speed-up": "x"}
_DMA = re2.compile(r"^dmatest-(?P<table>.+)-(\d+(?:\.\d+)?)-([a-z][a-z0-9]*)-(throughput|latency)$")
_DMA_UNITS = {"throughput": "MiB/s", "latency": "us"}
_DMA_LABELS = {"throughput": "Channel Bandwidth (MiB/s)", "latency": "Channel Latency (us)"}
MEMORY_LATENCY = "critical-memory-access-latency"
_MEMORY = re2.compile(rf"^(?P<table>{MEMORY_LATENCY})-(.+)-([a-z0-9_]+)$")
_NETWORK_UNITS = {"throughput": "Mbit/s", "local-cpu-util": "%", "remote-cpu-util": "%"}


def _mean(s: Series) -> float:
    return sum(s["values"]) / len(s["values"])


def _bytes(size: str) -> int:
    """'4k' -> 4096, '1m' -> 1048576, '102400' -> 102400: buffer sizes in the guides' order."""
    return int(size[:-1]) * 1024 ** "kmg".index(size[-1]) if size[-1] in "kmg" else int(size)


def shape(doc: dict[str, Any]) -> Shaped:
    """A metrics document (core.statistics.results.metrics_document) in the guides' shapes."""
    board = doc.get("run", {}).get("board", "board")
    steps: OrderedDict[str, list[Series]] = OrderedDict()
    for s in doc.get("series", []):
        steps.setdefault(s["step"], []).append(s)
    taken: set[int] = set()
    tables: list[Table] = []
    for step, series in steps.items():
        for build in (_openssl, _cyclictest, _iperf3, _rails):
            tables += build(step, series, board, taken)
    across = [s for series in steps.values() for s in series if id(s) not in taken]
    for build_across in (_storage, _netperf, _ne10, _dmatest, _memory_latency):
        tables += build_across(across, board, taken)
    order = list(steps)
    tables.sort(key=lambda t: order.index(t.section))    # stable: a step's own shapes first
    rest = OrderedDict((step, [s for s in series if id(s) not in taken])
                       for step, series in steps.items())
    return Shaped(_boot(doc, board), tables, rest)


def _take(taken: set[int], *series: Series) -> None:
    taken.update(id(s) for s in series)


def _openssl(step: str, series: list[Series], board: str, taken: set[int]) -> list[Table]:
    rows = []
    for s in series:
        if (m := _OPENSSL_SIZED.match(s["name"])) and s["unit"] == "KB/s":
            rows.append([m.group(1), m.group(2), s["display"]])
            _take(taken, s)
    rows.sort(key=lambda r: (r[0], int(r[1])))
    header = ["Algorithm", "Buffer Size (in bytes)", f"{board}: throughput (KBytes/Sec)"]
    return [Table(step, "OpenSSL Performance", header, rows)] if rows else []


def _cyclictest(step: str, series: list[Series], board: str, taken: set[int]) -> list[Table]:
    cores: dict[str, dict[int, Series]] = {}
    for s in series:
        if m := _PER_CORE.match(s["name"]):
            cores.setdefault(m.group(2), {})[int(m.group(1))] = s
            _take(taken, s)
    rows = [[label, ",".join(f"{_mean(cores[k][t]):.0f}" for t in sorted(cores[k]))]
            for k, label in _LATENCY_ROWS if k in cores]
    return [Table(step, "Latencies", ["Latencies", f"{board}:per-core"], rows)] if rows else []


def _iperf3(step: str, series: list[Series], board: str, taken: set[int]) -> list[Table]:
    """Throughput (what the receiver got) and the CPU load of both ends, one row for the step."""
    by_name = {s["name"]: s for s in series}
    if "iperf3-received" not in by_name:
        return []
    columns = [(label, by_name[name]) for name, label in _IPERF3_COLUMNS if name in by_name]
    _take(taken, *(s for _, s in columns))
    return [Table(step, "iperf3", ["Command Used"] + [f"{board}: {label}" for label, _ in columns],
                  [[step] + [s["display"] for _, s in columns]])]


def _rails(step: str, series: list[Series], board: str, taken: set[int]) -> list[Table]:
    """One table per mode, titled by it; the rail's min and max in the window stay generic."""
    by_name = {s["name"]: s for s in series}
    tables = []
    for total in series:
        if not total["name"].startswith("rail-total-"):
            continue
        mode = total["name"][len("rail-total-"):]
        rows = []
        for s in series:
            rail = s["name"][len("rail-"):-len(f"-{mode}")] \
                if s["name"].startswith("rail-") and s["name"].endswith(f"-{mode}") else ""
            if rail and rail != "total":
                volts = by_name.get(f"{s['name']}-voltage")
                rows.append([rail, volts["display"] if volts else "", s["display"]])
                _take(taken, s, *([volts] if volts else []))
        _take(taken, total)
        tables.append(Table(step, f"{mode} Power Performance",
                            ["Rail name", "Rail voltage(V)", "Power (mW)"],
                            rows + [["Total", "", total["display"]]]))
    return tables


def _grouped(series: list[Series], pattern: Any, units: Mapping[str, str],
             key: Callable[[Any], Any], taken: set[int]) -> OrderedDict[Any, list[tuple[Any, Series]]]:
    """Series whose name matches and whose unit is its measure's (the pattern's last group), by
    key. Left in their step's generic table: a name seen twice (two steps measuring the same; the
    first step's goes to the shape), and a table (the pattern's group `table`) that is no slug,
    such as a fio job named "Rand Read": import-guide would name its cells otherwise."""
    groups: OrderedDict[Any, list[tuple[Any, Series]]] = OrderedDict()
    seen: set[str] = set()
    for s in series:
        m = pattern.match(s["name"])
        if m and s["unit"] == units[m.group(pattern.groups)] and s["name"] not in seen \
                and slug(m.group("table")) == m.group("table"):
            seen.add(s["name"])
            groups.setdefault(key(m), []).append((m, s))
            _take(taken, s)
    return groups


def _storage(series: list[Series], board: str, taken: set[int]) -> list[Table]:
    tables = []
    for (suite, table), cells in _grouped(series, _STORAGE, _STORAGE_UNITS,
                                          lambda m: m.group(1, 2), taken).items():
        by_size: dict[str, dict[tuple[str, str], str]] = {}
        for m, s in cells:
            by_size.setdefault(m.group(3), {})[(m.group(4), m.group(5))] = s["display"]
        rows = [[size] + [by_size[size].get((d, k), "") for d, k, _ in _STORAGE_COLUMNS]
                for size in sorted(by_size, key=_bytes)]
        header = ["Buffer size (bytes)"] + [f"{board}: {label}" for *_, label in _STORAGE_COLUMNS]
        tables.append(Table(cells[0][1]["step"], f"{suite} {table}", header, rows))
    return tables


def _netperf(series: list[Series], board: str, taken: set[int]) -> list[Table]:
    tables = []
    for table, cells in _grouped(series, _NETPERF, _NETWORK_UNITS, lambda m: m.group(1),
                                 taken).items():
        framed = any(m.group(2) for m, _ in cells)
        by_row: dict[str, dict[str, str]] = {}
        for m, s in cells:
            by_row.setdefault(m.group(2) if framed else s["step"], {})[m.group(3)] = s["display"]
        columns = [(k, label) for k, label in _NETWORK_COLUMNS
                   if any(k in row for row in by_row.values())]
        rows = [[label] + [row.get(k, "") for k, _ in columns]
                for label, row in sorted(by_row.items(),
                                         key=lambda r: int(r[0]) if framed else 0)]
        header = ["Frame Size(bytes)" if framed else "Command Used"] + [
            f"{board}: {label}" for _, label in columns]
        tables.append(Table(cells[0][1]["step"], f"netperf {table}", header, rows))
    return tables


def _ne10(series: list[Series], board: str, taken: set[int]) -> list[Table]:
    tables = []
    for function, cells in _grouped(series, _NE10, _NE10_UNITS, lambda m: m.group(1),
                                    taken).items():
        by_row: dict[tuple[int, str], dict[str, str]] = {}
        for m, s in cells:
            by_row.setdefault((int(m.group(2)), m.group(3)), {})[m.group(4)] = s["display"]
        rows = [[str(length), direction] + [row.get(k, "") for k, _ in _NE10_COLUMNS]
                for (length, direction), row in sorted(by_row.items())]
        header = ["FFT length", "Direction"] + [f"{board}: {label}" for _, label in _NE10_COLUMNS]
        tables.append(Table(cells[0][1]["step"], f"ne10 {function}", header, rows))
    return tables


def _dmatest(series: list[Series], board: str, taken: set[int]) -> list[Table]:
    tables = []
    for table, cells in _grouped(series, _DMA, _DMA_UNITS, lambda m: m.group(1), taken).items():
        by_size: dict[float, dict[tuple[str, str], str]] = {}
        for m, s in cells:
            by_size.setdefault(float(m.group(2)), {})[(m.group(3), m.group(4))] = s["display"]
        columns = sorted({key for row in by_size.values() for key in row},
                         key=lambda k: (k[0], k[1] != "throughput"))
        rows = [[f"{size:g}"] + [row.get(k, "") for k in columns]
                for size, row in sorted(by_size.items())]
        header = ["Buffer Size (KiB)"] + [f"{board}: {cls.upper()} {_DMA_LABELS[measure]}"
                                          for cls, measure in columns]
        tables.append(Table(cells[0][1]["step"], f"dmatest {table}", header, rows))
    return tables


def _memory_latency(series: list[Series], board: str, taken: set[int]) -> list[Table]:
    """Rows by memory target, a column per core, in the order the run measured them."""
    cells = _grouped(series, _MEMORY, defaultdict(lambda: "ns"), lambda m: 0, taken).get(0, [])
    if not cells:
        return []
    cores = list(OrderedDict.fromkeys(m.group(3) for m, _ in cells))
    by_target: OrderedDict[str, dict[str, str]] = OrderedDict()
    for m, s in cells:
        by_target.setdefault(m.group(2), {})[m.group(3)] = s["display"]
    rows = [[target.replace("-", " ").upper()] + [row.get(core, "") for core in cores]
            for target, row in by_target.items()]
    header = ["Memory"] + [f"{board}: {core} (ns)" for core in cores]
    return [Table(cells[0][1]["step"], MEMORY_LATENCY, header, rows)]


def _boot(doc: dict[str, Any], board: str) -> Table | None:
    boot = doc.get("bootSummary") or {}
    if not boot:
        return None
    return Table("", "Linux boot time",
                 ["Boot Configuration", f"{board}: Boot time in seconds: avg(min,max)"],
                 [[phase, s["display"]] for phase, s in boot.items()])
