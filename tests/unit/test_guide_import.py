"""Every csv-table of TI's AM6x performance guides imports, cell by cell, named as our suites name
their metrics. Excerpts (csv-tables only) in tests/data/guides/ti_*.rst; see its README."""

from __future__ import annotations

import csv
import re

import pytest

from benchfarm.core.guides.guide import GuideError, read_guide
from benchfarm.core.readings import power
from benchfarm.suites.registry import parse
from tests.conftest import GUIDES, guide, sample

TI_GUIDES = sorted(p.name for p in GUIDES.glob("ti_*.rst"))


def _label_columns(header: list[str]) -> int:
    """Independently of the importer: label columns are those before the first header naming a
    board ('board: label'); a table naming no board has one, or two when the second is a Size."""
    for i, h in enumerate(header):
        if i and re.match(r"^[\w.-]+\s*:", h):
            return i
    return 2 if len(header) > 2 and re.match(r"(?i)(buffer )?size", header[1]) else 1


_NUMBER = r"~?\s*-?\d+(?:\.\d+)?\s*%?"
_ONE_VALUE = re.compile(rf"^{_NUMBER}(?:\s*\(min\s*-?[\d.]+,\s*max\s*-?[\d.]+\))?$")
_PER_CORE = re.compile(r"^\d+(?:\s*,\s*\d+)+$")


def numeric_cells(text: str) -> dict[tuple[int, int, int], int]:
    """(table, row, column) of every value cell that holds numbers, and how many: one, or one per
    core in a per-core cell ("5,5,4,4"). Read with the csv module over each directive's body,
    independently of the importer; a value cell with a digit in any other shape fails."""
    found: dict[tuple[int, int, int], int] = {}
    table, header, row = -1, None, -1
    for line in text.splitlines():
        s = line.strip()
        if s.startswith(".. csv-table::"):
            table, header, row = table + 1, None, -1
        elif s.startswith(":header:"):
            header = next(csv.reader([s[len(":header:"):]], skipinitialspace=True))
        elif header is not None and s and line[0] in " \t" and not s.startswith(":"):
            row += 1
            cells = next(csv.reader([s], skipinitialspace=True))
            for col in range(_label_columns(header), min(len(cells), len(header))):
                cell = cells[col].strip()
                if _ONE_VALUE.match(cell):
                    found[(table, row, col)] = 1
                elif _PER_CORE.match(cell):
                    found[(table, row, col)] = len(cell.split(","))
                else:
                    assert not re.search(r"\d", cell), f"table {table} row {row}: {cell!r}"
        elif s and line[0] not in " \t":
            header = None
    return found


def csv_table_count(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.strip().startswith(".. csv-table::"))


@pytest.mark.parametrize("name", TI_GUIDES)
def test_every_numeric_cell_of_every_table_is_imported(name):
    text = guide(name)
    g = read_guide(text)
    rows = [r for t in g.tables for r in t.rows]
    cells = numeric_cells(text)
    assert {r.cell for r in rows} == cells.keys()
    assert len(rows) == sum(cells.values())
    assert g.problems == []


# (csv-tables, value cells, values) per guide; each excerpt's first line names its source commit
PINNED = {"am62ax_linux": (27, 434, 434), "am62ax_rt_linux": (1, 12, 12),
          "am62px_linux": (41, 690, 690), "am62px_rt_linux": (1, 3, 12),
          "am62x_linux": (62, 1525, 1525), "am62x_rt_linux": (1, 3, 12),
          "am64x_linux": (0, 0, 0), "am64x_rt_linux": (24, 341, 344),
          "am65x_linux": (0, 0, 0), "am65x_rt_linux": (18, 318, 318)}


def test_the_excerpts_are_the_whole_guides():
    """The pinned counts of the complete guides, recounted here from the excerpts. The AM64x and
    AM65x Linux guides have no csv-table at any stored version (AM65x: see its RT-Linux guide)."""
    counts = {}
    for name in TI_GUIDES:
        text = guide(name)
        assert text.startswith(".. source: TexasInstruments/processor-sdk-doc source/devices/")
        cells = numeric_cells(text)
        counts[name[3:-len("_performance_guide.rst")]] = (
            csv_table_count(text), len(cells), sum(cells.values()))
    assert counts == PINNED


def test_the_am64x_and_am62ax_rt_guides_import_without_error():
    stub = read_guide(guide("ti_am64x_linux_performance_guide.rst"))   # TI ships it without tables
    assert (stub.tables, stub.problems) == ([], [])
    rt64 = read_guide(guide("ti_am64x_rt_linux_performance_guide.rst"))
    base = rt64.baseline()
    assert base["cyclictest-t1-max (us)"].mean == 66
    assert base["kernel-to-prompt (s)"].mean == 21.64
    assert base["openssl-aes-128-cbc-16384B (KB/s)"].mean == 138341.03
    icssg = "netperf-icssg-udp-ingress-throughput-0-loss-1518"
    assert base[f"{icssg}-packets-per-second (kPPS)"].mean == 32
    rt62a = read_guide(guide("ti_am62ax_rt_linux_performance_guide.rst"))
    assert rt62a.boards == [] and rt62a.problems == []
    assert rt62a.baseline()["cyclictest-t1-max (us)"].mean == 45


def test_one_column_per_board_and_a_board_is_picked():
    g = read_guide(guide("ti_am62x_linux_performance_guide.rst"))
    assert g.boards == ["am62xx_lp_sk-fs", "am62xx_sk-fs", "am62xxsip_sk-fs"]
    with pytest.raises(GuideError, match="am62xx_sk-fs"):
        g.baseline()
    with pytest.raises(GuideError, match="no board 'am62xx-evm'"):
        g.baseline("am62xx-evm")
    sk = g.baseline("am62xx_sk-fs")
    assert sk["dhrystone_per_mhz (DMIPS/MHz)"].mean == 2.78
    assert sk["kernel-to-prompt (s)"].mean == 18.30
    assert sk["alsa-capture-48000hz-cpu (%)"].mean == 0.16
    assert sk["openssl-aes-128-cbc-16B (KB/s)"].mean == 408.84
    assert sk["fio-emmc-ext4-fio-1g-4k-read-throughput (MB/s)"].mean == 59.52
    tcp = "netperf-cpsw2g-tcp-bidirectional-throughput"
    assert sk[f"{tcp}-throughput (Mbit/s)"].mean == 1822.62
    assert sk[f"{tcp}-local-cpu-util (%)"].mean == 66.72
    assert sk["netperf-cpsw2g-udp-egress-throughput-0-loss-1518-local-cpu-util (%)"].mean == 11.87
    assert sk["dd-mmc-ext4-102400-read-cpu-load (%)"].mean == 0.71
    assert sk["rail-total-deep-sleep (mW)"].mean == 27.64        # tables naming no board count
    assert sk["rail-vdd_core-mcu-only-voltage (V)"].mean == 0.85
    assert sk["resume-latency-mcu-only (ms)"].mean == 94
    assert "gfxbench-performance-gfxbench-3.x-gl_trex_off-score ()" not in sk   # lp board only
    sip = g.baseline("am62xxsip_sk-fs")
    assert (sip["dd-emmc-ext4-5242880-write-throughput (MB/s)"].min,
            sip["dd-emmc-ext4-5242880-write-throughput (MB/s)"].max) == (32.42, 98.19)


def test_captions_title_untitled_power_tables_and_percent_cells_read():
    g = read_guide(guide("ti_am62ax_linux_performance_guide.rst"))
    assert [t.title for t in g.tables[-2:]] == ["Deep sleep", "MCU only"]
    assert g.baseline()["rail-vdd_lpddr4/vdd_ddr4-deep-sleep (mW)"].mean == 6.07
    px = read_guide(guide("ti_am62px_linux_performance_guide.rst")).baseline()
    assert px["cpu-usage-sha2-512-arm-ce (%)"].mean == 99
    assert px["crypto-accelerator-performance-aes-128-ecb-16 (MB/s)"].mean == 0.44   # "16 bytes"
    assert px["crypto-accelerator-performance-aes-128-cbc-16-arm-ce (MB/s)"].mean == 97.37
    assert px["rail-total-i-o-only-ddr (mW)"].mean == 10.87
    assert (px["coremark-pro ()"].mean, px["coremark-pro-multicore ()"].mean) == (955.64, 1689.37)


@pytest.mark.parametrize("name", TI_GUIDES)
def test_no_two_values_of_a_board_share_a_metric_name(name):
    """Every value is reachable by `compare`: a name given twice for one board would hide one."""
    rows = [(r.board, r.key) for t in read_guide(guide(name)).tables for r in t.rows]
    assert len(rows) == len(set(rows))


def test_a_run_and_the_guide_name_the_same_metrics():
    rt = read_guide(guide("ti_am62ax_rt_linux_performance_guide.rst")).baseline()
    run = {m.key for m in parse("cyclictest", sample("cyclictest/plain_t2_p99_i1000_l5000.txt"))}
    assert {k for k in run if k in rt} == {f"cyclictest-t{t}-{s} (us)" for t in (0, 1)
                                          for s in ("min", "avg", "max")}
    lin = read_guide(guide("ti_am62x_linux_performance_guide.rst")).baseline("am62xx_sk-fs")
    alsa = {m.key for m in parse("alsa", '"48000","1535980.91","0.75"\n')}
    assert alsa <= lin.keys()
    rails = power.RailSummary("vdd_core", 0.85, 9.0, 8.0, 10.0, 3)
    assert {m.key for m in power.metrics("deep-sleep", [rails])} & lin.keys() == {
        "rail-vdd_core-deep-sleep (mW)", "rail-vdd_core-deep-sleep-voltage (V)",
        "rail-total-deep-sleep (mW)"}


def test_a_table_that_cannot_be_read_is_reported_by_title():
    text = ('.. csv-table:: Odd Table\n    :header: "Name","board-x: perf"\n\n'
            '    "a (ms)","fast"\n    "b (ms)","slow"\n\n'
            '.. csv-table:: Good Table\n    :header: "Name","board-x: perf"\n\n'
            '    "c (ms)","1.5","2.5"\n')
    g = read_guide(text)
    assert [t.title for t in g.tables] == ["Good Table"]
    assert g.problems == [
        "Odd Table: not imported: row 1, column 2: 'fast' is not a number; "
        "row 2, column 2: 'slow' is not a number",
        "Good Table: row 1 has 3 cells for 2 columns"]
