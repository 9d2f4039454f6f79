"""Which cells of a guide's csv-table are values, and the metric name each one gets.

A header cell `"am62xx_sk-fs: Write EXT4 Throughput (Mbytes/sec)"` names a board and a column
label with its unit. Label columns come first: those before the first board column (algorithm,
buffer size), or, in tables naming no board, the first column and a `Size` column after it.
Names follow the suites where one exists, so `compare` lines a run up with the guide:
`Benchmarks`/`perf` rows keep their own `name (unit)` (lmbench, dhrystone, stream …), with
`-multicore` in a two-core/multi-core table (`coremark-pro-multicore`, as suites.coremarkpro); audio
tables give `alsa-capture-48000hz-throughput`; OpenSSL `openssl-aes-128-cbc-1024B`; rails
`rail-vdd_core-deep-sleep` and `rail-total-deep-sleep` (core.readings.power); cyclictest
`cyclictest-t0-max` per core; boot tables `kernel-to-prompt` (their first row; a row labelled
with a phase's own name keeps it). Storage tables by buffer size go to fio (a title with the word
FIO) or dd: `fio-emmc-ext4-fio-1g-4k-read-throughput`, `dd-emmc-ext4-102400-write-cpu-load`, as
`suites.fio` names a job called `emmc-ext4-fio-1g` and `suites.dd` a step for table `emmc-ext4`.
DMA copy tables (a title starting with dmatest or UDMA, by buffer size) go to dmatest:
`dmatest-ddr-to-ddr-block-copy-512-nc-latency` for "NC Channel Latency (μs)", as `suites.dmatest`
names them. Ethernet tables (`Command Used` or `Frame Size`) go to netperf:
`netperf-cpsw2g-udp-egress-throughput-0-loss-64-local-cpu-util`, as `suites.netperf` names a run
for that table. A title whose first word is the suite (`fio randread`, `iperf3`) names it, as
benchfarm's own reports title their tables. Any other table: title, row labels and column label,
slugged (`uboot-emmc-raw-2000000-write-throughput`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import re2

from benchfarm.suites.base import normalize_unit, slug

# RE2 (linear whatever the text: a guide is any vendor's, or a tenant's, file)
_BOARD = re2.compile(r"^\s*([A-Za-z0-9][\w.-]*[\d_-][\w.-]*)\s*:\s*(.*)$")
_PAREN = re2.compile(r"\(([^()]*)\)")
_NAME_UNIT = re2.compile(r"^(.*?)\s*\(([^()]*)\)\s*$")
_UNIT = re2.compile(r"[A-Za-zµμ%/\\]{1,12}")
_PERCENT = re2.compile(r"(?i)cpu (load|usage)")
_SIZE = re2.compile(r"(?i)(buffer )?size\b")
_POWER = re2.compile(r"(?i)power performance")
_CPU_LOAD = re2.compile(r"(?i)cpu load")
_MULTI = re2.compile(r"(two|multi)\s*core")
_CORE = re2.compile(r"cpu\s*(\d+)")
_PHASE = re2.compile(r"[a-z][a-z0-9_-]*")
_EMPTY = {"", "n/a", "na", "-"}


class Cell(NamedTuple):
    row: int
    column: int
    board: str
    name: str
    unit: str
    text: str


def split_name(label: str) -> tuple[str, str]:
    """'bw_mem-bcopy-16mb (mb/s)' -> ('bw_mem-bcopy-16mb', 'MB/s')."""
    m = _NAME_UNIT.match(label)
    if not m:
        return label.strip(), ""
    return m.group(1).strip(), normalize_unit(m.group(2))


def board_of(header_cell: str) -> tuple[str, str]:
    """'am62xx_sk-fs: perf' -> ('am62xx_sk-fs', 'perf'); 'CPU 0' -> ('', 'CPU 0')."""
    m = _BOARD.match(header_cell)
    return (m.group(1), m.group(2).strip()) if m else ("", header_cell.strip())


def label_unit(label: str) -> tuple[str, str]:
    """A column label without its unit, and the unit: 'THROUGHPUT (Mbits/sec)' -> Mbit/s,
    'CPU Load % (LOCAL_CPU_UTIL)' -> %, 'Rail voltage(V)' -> V."""
    unit = ""
    for candidate in reversed(_PAREN.findall(label)):
        if "_" not in candidate and _UNIT.fullmatch(candidate.strip()):
            unit = normalize_unit(candidate)
            break
    bare = " ".join(_PAREN.sub(" ", label).replace("%", " ").split())
    if not unit and ("%" in label or _PERCENT.search(label)):
        unit = "%"
    if not unit and bare.lower() == "fps":
        unit = "FPS"
    return bare, unit


def key_columns(header: Sequence[str]) -> int:
    boards = [i for i, h in enumerate(header) if board_of(h)[0]]
    if boards:
        return max(boards[0], 1)
    return 2 if len(header) > 2 and _SIZE.match(header[1]) else 1


def _mode(title: str) -> str:
    text = _POWER.sub("", title).replace("DeepSleep", "Deep Sleep")
    return slug(text)


_STORAGE = re2.compile(r"(?i)^(write|read)\b.*\b(throughput|cpu load)$")


def _suite_table(title: str, suites: tuple[str, ...], default: str) -> tuple[str, str]:
    """The suite a table's cells go to and the table's slug: a title whose first word is one of
    `suites` names it (the rest is the table), any other title goes to `default` whole."""
    words = slug(title).split("-")
    if words[0] in suites:
        return words[0], "-".join(words[1:])
    return default, slug(title)


def _network(suite: str, label: str) -> str:
    """An Ethernet column as netperf names its keys: THROUGHPUT (iperf3: what the receiver got),
    CPU Load % (LOCAL_CPU_UTIL) -> local-cpu-util, Packets Per Second -> packets-per-second."""
    bare, _ = label_unit(label)
    if bare.lower() == "throughput":
        return "received" if suite == "iperf3" else "throughput"
    if _CPU_LOAD.match(bare):
        return "remote-cpu-util" if "REMOTE" in label.upper() else "local-cpu-util"
    return slug(bare)


def _stat(label: str) -> str:
    word = label.split()[0].lower() if label.split() else ""
    return {"minimum": "min", "average": "avg", "maximum": "max"}.get(word, slug(word))


def _name(title: str, header: Sequence[str], row: Sequence[str], nkeys: int, label: str,
          row_index: int) -> tuple[str, str] | None:
    """(name, unit) of the value in one column; None when that column is a list per core."""
    head0, t = header[0].strip().lower() if header else "", title.lower()
    key = row[0].strip()
    bare, unit = label_unit(label)
    if bare.lower() in ("perf", "") and nkeys == 1:
        name, unit = split_name(key)
        multi = _MULTI.search(t) and not name.endswith("-multicore")
        return (f"{name}-multicore" if multi else name), unit
    if head0 == "rail name":
        rail = "total" if key.lower() == "total" else key
        suffix = "-voltage" if "voltage" in label.lower() else ""
        return f"rail-{rail}-{_mode(title)}{suffix}", unit
    if head0 == "low power mode":
        return f"resume-latency-{_mode(key)}", unit
    if head0 == "latencies":
        core = _CORE.fullmatch(bare.lower())
        if "per-core" in label.lower():
            return None
        return (f"cyclictest-t{core.group(1)}-{_stat(key)}" if core
                else f"cyclictest-{_stat(key)}"), split_name(key)[1]
    if "boot time" in t or head0 == "boot configuration":
        if _PHASE.fullmatch(key):
            return key, "s"
        return ("kernel-to-prompt" if row_index == 0 else f"boot-{slug(key)}"), "s"
    if head0.startswith("buffer size") and (io := _STORAGE.match(bare)):
        fio = "fio" in slug(t).split("-")
        suite, table = _suite_table(title, ("fio", "dd"), "fio" if fio else "dd")
        measure = "cpu-load" if unit == "%" else "throughput"
        return f"{suite}-{table}-{slug(key)}-{io.group(1).lower()}-{measure}", unit
    if head0 == "command used" or head0.startswith("frame size"):
        suite, table = _suite_table(title, ("netperf", "iperf3"), "netperf")
        frame = f"-{slug(key)}" if head0.startswith("frame size") else ""
        return "-".join(p for p in (suite, table) if p) + f"{frame}-{_network(suite, label)}", unit
    if slug(title).split("-")[0] in ("dmatest", "udma") and head0.startswith("buffer size"):
        table = "-".join(slug(title).split("-")[1:])
        measure = "latency" if "latency" in bare.lower() else "throughput"
        return f"dmatest-{table}-{slug(key)}-{slug(bare).split('-')[0]}-{measure}", unit
    if t.startswith(("audio capture", "audio playback")):
        kind = "cpu" if unit == "%" else "throughput"
        return f"alsa-{t.split()[1]}-{slug(key)}hz-{kind}", unit
    if t == "openssl performance" and nkeys == 2:
        return f"openssl-{slug(key)}-{''.join(c for c in row[1] if c in '0123456789')}B", unit
    if t == "openssl cpu load":
        return f"openssl-{slug(key)}-cpu", unit
    keys = [slug(_bytes_off(row[k].strip())) for k in range(nkeys)
            if k < len(row) and header[k].strip().lower() != "command used"]
    head = "-".join([slug(title)] + keys)
    seen = set(head.split("-"))
    tail = [w for w in slug(bare).split("-") if w not in seen]
    return "-".join([head] + tail), unit


def _bytes_off(label: str) -> str:
    """A buffer size without its word `bytes` at the end ('4096 bytes' -> '4096')."""
    return label[:-len("bytes")].rstrip() if label.endswith("bytes") else label


def value_cells(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]
                ) -> tuple[list[Cell], list[str]]:
    """Every non-empty value cell with its board, metric name and unit; and what was odd."""
    problems: list[str] = []
    if not header:
        return [], ["no :header: line"]
    nkeys = key_columns(header)
    out: list[Cell] = []
    taken: set[tuple[str, str]] = set()
    for r, row in enumerate(rows):
        if len(row) > len(header):
            problems.append(f"row {r + 1} has {len(row)} cells for {len(header)} columns")
        for c in range(nkeys, min(len(row), len(header))):
            text = row[c].strip()
            if text.lower() in _EMPTY:
                continue
            board, label = board_of(header[c])
            named = _name(title, header, row, nkeys, label, r)
            if named is not None:
                name = named[0] if (board, named[0]) not in taken else f"{named[0]}-c{c + 1}"
                taken.add((board, name))
                out.append(Cell(r, c, board, name, named[1], text))
                continue
            stat, unit = _stat(row[0]), split_name(row[0])[1]
            out += [Cell(r, c, board, f"cyclictest-t{core}-{stat}", unit, part.strip())
                    for core, part in enumerate(text.split(","))]
    return out, problems
