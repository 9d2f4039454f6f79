"""The AM62x benchmark note's remaining families (issue 25, item 5): Ne10's FFT performance test,
the kernel's dmatest (UDMA DDR-to-DDR block copy) and the MCU cores' memory access latency read
from their consoles. No virtual board has Ne10, a UDMA or an MCU core: the outputs in
tests/data/samples/{ne10,dmatest,mcu-latency} are printed in the real tools' formats (see
INDEX.md) with the note's numbers, and these tests read them back to the note's tables."""

from __future__ import annotations

import pytest

from benchfarm.core.guides.guide import read_guide
from benchfarm.core.statistics.results import SuiteRecord, metrics_document
from benchfarm.errors import ParseError
from benchfarm.report.tables import rst
from benchfarm.suites.base import Metric
from benchfarm.suites.registry import check_parameters, parse
from tests.conftest import sample

# The note's table "UDMA: DDR to DDR block copy": KiB -> (NC MiB/s, NC latency us)
UDMA = {1: (77.02, 12.68), 2: (143.61, 13.60), 4: (207.45, 18.83), 8: (302.46, 25.83),
        16: (360.36, 43.36), 32: (413.03, 75.66), 64: (444.93, 140.47), 128: (461.85, 270.65),
        256: (470.79, 531.02), 512: (475.26, 1052.05)}
# The note's "critical memory access latency" (ns) of the R5F (WKUP) and M4F (MCU) cores
LATENCY = {"r5f_wkup": {"lpddr4": 228, "ocsram-main": 70, "r5f-wkup-tcm": 2.5, "m4f-mcu-tcm": 233},
           "m4f_mcu": {"lpddr4": 350, "ocsram-main": 170, "r5f-wkup-tcm": 180, "m4f-mcu-tcm": 10}}
MCU = {"clockMHz": "400", "accesses": "8192", "table": "critical-memory-access-latency",
       "pattern": r"(?P<name>[A-Z][A-Z0-9 ]*[A-Z0-9])\s+(?P<cycles>\d+) cycles"}


def values(metrics):
    return {m.name: (m.value, m.unit) for m in metrics}


def test_ne10_gives_one_transforms_time_per_length_and_direction():
    m = values(parse("ne10", sample("ne10/dsp_performance_fft_float32.txt")))
    # 1024 points: 225 ms for 10,000,000 // 1024 = 9765 transforms -> 23.04 us (the note: 23 us)
    assert m["ne10-fft-c2c-1d-float32-1024-forward-neon"] == (23.041, "us")
    assert m["ne10-fft-c2c-1d-float32-1024-forward-c"] == (82.949, "us")
    assert m["ne10-fft-c2c-1d-float32-1024-forward-neon-speed-up"] == (3.6, "x")
    assert m["ne10-fft-c2c-1d-float32-1024-inverse-neon"] == (23.963, "us")   # the second row
    assert m["ne10-fft-r2c-1d-float32-8-forward-neon"][1] == "us"
    assert len([k for k in m if k.startswith("ne10-fft-c2c")]) == 14 * 2 * 3
    half = values(parse("ne10", sample("ne10/dsp_performance_fft_float32.txt"),
                        {"testCount": "5000000"}))
    assert half["ne10-fft-c2c-1d-float32-1024-forward-neon"][0] == pytest.approx(46.1, abs=0.05)


def test_ne10_without_performance_rows_or_with_a_bad_count_is_a_clear_error():
    with pytest.raises(ParseError, match="no FFT performance rows"):
        parse("ne10", "----------test_fft_c2c_1d_float32_conformance start\nFFT size 4\n")
    assert "testCount" in check_parameters("ne10", {"testCount": "lots"})


def test_dmatest_gives_the_notes_udma_table_by_buffer_size():
    m = values(parse("dmatest", sample("dmatest/am62x_nc_ddr_to_ddr_1k_512k.txt")))
    for kib, (mib, latency) in UDMA.items():
        assert m[f"dmatest-ddr-to-ddr-block-copy-{kib}-nc-throughput"] == (mib, "MiB/s")
        got, unit = m[f"dmatest-ddr-to-ddr-block-copy-{kib}-nc-latency"]
        assert unit == "us" and got == pytest.approx(latency, abs=0.01)
    assert len(m) == 2 * len(UDMA)


def test_dmatest_threads_of_one_size_add_up_and_failures_fail_the_step():
    two = ("[ 1.0] dmatest: dma0chan0-copy0: summary 100 tests, 0 failures 1000.00 iops 4000 KB/s (0)\n"
           "[ 1.0] dmatest: dma0chan1-copy0: summary 100 tests, 0 failures 500.00 iops 2000 KB/s (0)\n")
    m = values(parse("dmatest", two, {"bufferSize": "4096", "channelClass": "hc"}))
    assert m["dmatest-ddr-to-ddr-block-copy-4-hc-throughput"] == (5.86, "MiB/s")   # 6000 KiB/s
    assert m["dmatest-ddr-to-ddr-block-copy-4-hc-latency"] == (1500.0, "us")      # 1 ms, 2 ms
    failed = "test_buf_size=4096\ndmatest: dma0chan0-copy0: summary 10 tests, 2 failures 9.00 iops 36 KB/s (0)"
    with pytest.raises(ParseError, match=r"2 of 10 copies failed \(result 0\) \(line 2\)"):
        parse("dmatest", failed)
    with pytest.raises(ParseError, match="before any buffer size"):
        parse("dmatest", two)
    assert "channelClass" in check_parameters("dmatest", {"channelClass": "N C"})


def test_mcu_consoles_give_one_reads_latency_per_memory_target_and_core():
    for core, expected in LATENCY.items():
        m = values(parse("console-timing", sample(f"mcu-latency/{core}_trace0.txt"),
                         {**MCU, "core": core}))
        assert m == {f"critical-memory-access-latency-{t}-{core}": (pytest.approx(ns, abs=0.01), "ns")
                     for t, ns in expected.items()}
    assert "needs a table" in check_parameters("console-timing", {"core": "r5f_wkup"})
    assert "accesses" in check_parameters("console-timing", {**MCU, "accesses": "0"})


def _doc():
    steps = [("ne10", "ne10", sample("ne10/dsp_performance_fft_float32.txt"), {}),
             ("udma", "dmatest", sample("dmatest/am62x_nc_ddr_to_ddr_1k_512k.txt"), {}),
             ("r5f-latency", "console-timing", sample("mcu-latency/r5f_wkup_trace0.txt"),
              {**MCU, "core": "r5f_wkup"}),
             ("m4f-latency", "console-timing", sample("mcu-latency/m4f_mcu_trace0.txt"),
              {**MCU, "core": "m4f_mcu"})]
    records = [SuiteRecord(step, suite, i, False, 0, 1.0, [
        Metric(m.name, round(m.value * scale, 3), m.unit, m.higher_is_better)
        for m in parse(suite, text, params)])
        for i, scale in ((1, 1.0), (2, 1.1)) for step, suite, text, params in steps]
    return metrics_document({"board": "am62xx-sk-1", "namespace": "d", "name": "note"}, [], records)


def test_the_report_has_the_notes_tables_and_imports_back_to_every_metric():
    doc = _doc()
    text = rst(doc)
    b = "am62xx-sk-1"
    assert ".. csv-table:: dmatest ddr-to-ddr-block-copy" in text
    assert (f'   :header: "Buffer Size (KiB)","{b}: NC Channel Bandwidth (MiB/s)",'
            f'"{b}: NC Channel Latency (us)"') in text
    assert text.index('"2","150') < text.index('"512","49')                    # by size
    assert ".. csv-table:: ne10 fft-c2c-1d-float32" in text
    assert f'"FFT length","Direction","{b}: NEON (us)","{b}: C (us)"' in text
    assert '"1024","forward","24.19 (min 23.04, max 25.34)"' in text
    assert ".. csv-table:: critical-memory-access-latency" in text
    assert f'   :header: "Memory","{b}: r5f_wkup (ns)","{b}: m4f_mcu (ns)"' in text
    assert '"R5F WKUP TCM","2.62 (min 2.50, max 2.75)","189.00 (min 180.00, max 198.00)"' in text
    imported = read_guide(text)
    assert imported.problems == []
    back = imported.baseline(b)
    assert set(back) == {f"{s['name']} ({s['unit']})" for s in doc["series"]}
    for s in doc["series"]:
        assert back[f"{s['name']} ({s['unit']})"].mean == pytest.approx(
            sum(s["values"]) / len(s["values"]), abs=0.006)


def test_the_notes_own_udma_table_lines_up_with_a_dmatest_run():
    """The note's table as a guide would print it (μs, "Bandwidth"): the same metric names."""
    rows = "\n".join(f'   "{kib}","{mib}","{lat}"' for kib, (mib, lat) in UDMA.items())
    table = (".. csv-table:: UDMA: DDR to DDR Block Copy\n"
             '   :header: "Buffer Size (KiB)","am62xx_sk-fs: NC Channel Bandwidth (MiB/s)",'
             '"am62xx_sk-fs: NC Channel Latency (μs)"\n\n' + rows + "\n")
    guide = read_guide(table).baseline("am62xx_sk-fs")
    run = parse("dmatest", sample("dmatest/am62x_nc_ddr_to_ddr_1k_512k.txt"))
    assert set(guide) == {m.key for m in run}
    assert guide["dmatest-ddr-to-ddr-block-copy-512-nc-latency (us)"].mean == 1052.05
