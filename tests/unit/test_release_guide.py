"""A release's guide from the runs of one plan on several boards (issue 25, items 2 and 3): one
column per board in every table, the guides' section order, missing columns said, every cell
imported back to its board's metric, and the changes against the previous release per board."""

from __future__ import annotations

import pytest

from benchfarm.core.guides.guide import GuideError, read_guide
from benchfarm.core.statistics.regression import RegressionPolicy
from benchfarm.core.statistics.results import SuiteRecord, metrics_document
from benchfarm.report.release import (
    Column,
    changes_html,
    changes_md,
    release_changes,
    release_guide,
    release_html,
    release_md,
    release_rst,
)
from benchfarm.suites.base import Metric
from benchfarm.suites.registry import parse
from tests.conftest import sample

STEPS = [   # step, suite, output, parameters
    ("dhrystone", "dhrystone", sample("dhrystone/dhry21_200M.txt"), {"cpuClockMHz": "1000"}),
    ("bw_mem", "lmbench", sample("lmbench/bw_mem_8M_bcopy.txt"), {"tool": "bw_mem", "op": "bcopy"}),
    ("stream", "stream", sample("stream/stream_c_omp_default.txt"), {}),
    ("fio-write", "fio", sample("fio/emmc-ext4-fio-1g_write_1m_16M.json"), {}),
    ("openssl-cbc", "openssl", sample("openssl/speed_evp_aes-128-cbc.stdout.txt"), {}),
    ("udma", "dmatest", sample("dmatest/am62x_nc_ddr_to_ddr_1k_512k.txt"), {}),
]
BOARDS = ("qemu-x86", "qemu-arm64-a53", "qemu-x86-gpu")


def run_doc(board: str, scale: float, iterations: int = 3) -> dict:
    """A run of STEPS on `board`, every figure times `scale` (plus 1 % noise per iteration)."""
    records = []
    for i in range(1, iterations + 1):
        jitter = 1 + 0.01 * (i - 2)
        for step, suite, text, params in STEPS:
            records.append(SuiteRecord(step, suite, i, False, 0, 1.0, [
                Metric(m.name, round(m.value * scale * jitter, 3), m.unit, m.higher_is_better)
                for m in parse(suite, text, params)]))
    boots = [{"kernel-to-prompt": 2.0 * scale + 0.01 * i} for i in range(iterations)]
    return metrics_document({"board": f"{board}-0", "namespace": "lab", "name": f"r-{board}"},
                            boots, records)


def columns(scales=(1.0, 0.5, 0.8), iterations=3):
    return [Column(b, run_doc(b, s, iterations)) for b, s in zip(BOARDS, scales, strict=True)]


def test_every_table_has_one_column_per_board_in_the_campaigns_order():
    text = release_rst(release_guide("11.01", columns()))
    assert text.startswith("=======================\nPerformance Guide 11.01\n====")
    assert '   :header: "Benchmarks","qemu-x86: perf","qemu-arm64-a53: perf","qemu-x86-gpu: perf"' \
        in text
    assert ('   :header: "Buffer size (bytes)","qemu-x86: Write Throughput (Mbytes/sec)",'
            '"qemu-x86: Write CPU Load (%)","qemu-x86: Read Throughput (Mbytes/sec)",'
            '"qemu-x86: Read CPU Load (%)","qemu-arm64-a53: Write Throughput (Mbytes/sec)"') in text
    assert ('   :header: "Buffer Size (KiB)","qemu-x86: NC Channel Bandwidth (MiB/s)",'
            '"qemu-x86: NC Channel Latency (us)","qemu-arm64-a53: NC Channel Bandwidth (MiB/s)"'
            ) in text
    assert '"Linux boot time"' not in text and ".. csv-table:: Linux boot time" in text
    # the guides' order: system benchmarks, boot time, then the drivers
    order = [text.index(s) for s in ("System Benchmarks\n---", "Boot-time Measurement\n---",
                                     "Storage\n---", "Crypto\n---", "DMA\n---")]
    assert order == sorted(order)
    assert text.index("dhrystone\n^") < text.index("stream\n^") < text.index("Boot-time")


def test_the_guide_imports_back_to_every_metric_of_every_board():
    cols = columns()
    imported = read_guide(release_rst(release_guide("11.01", cols)))
    assert imported.problems == []
    for col in cols:
        back = imported.baseline(col.name)
        made = {f"{s['name']} ({s['unit']})": s for s in col.doc["series"]}
        assert set(back) == set(made) | {"kernel-to-prompt (s)"}
        for key, s in made.items():
            assert back[key].mean == pytest.approx(sum(s["values"]) / len(s["values"]), abs=0.006)
            assert back[key].min == pytest.approx(min(s["values"]), abs=0.006)


def test_a_missing_column_stays_in_every_table_and_the_guide_says_why():
    cols = columns()
    cols[1] = Column("qemu-arm64-a53", None, "BootFailed: no prompt after 2 boards")
    guide = release_guide("11.01", cols)
    text = release_rst(guide)
    assert ".. note:: qemu-arm64-a53: missing (BootFailed: no prompt after 2 boards)" in text
    assert '"Benchmarks","qemu-x86: perf","qemu-arm64-a53: perf","qemu-x86-gpu: perf"' in text
    for tables in guide.sections.values():
        for t in tables:
            i = next(i for i, h in enumerate(t.header) if h.startswith("qemu-arm64-a53: "))
            assert all(r[i] == "n/a" for r in t.rows), t.title
    imported = read_guide(text)
    assert set(imported.baseline("qemu-x86-gpu"))
    with pytest.raises(GuideError):
        imported.baseline("qemu-arm64-a53")
    assert "qemu-arm64-a53: missing" in release_md(guide)
    assert "qemu-arm64-a53: missing" in release_html(guide)


def test_the_html_guide_has_the_tables_and_a_bar_per_board_and_row():
    page = release_html(release_guide("11.01", columns()))
    assert page.count("<h2>") == 5 and "<th>qemu-x86-gpu: perf</th>" in page
    assert 'title="qemu-arm64-a53: ' in page and 'class="bar"' in page


def test_changes_name_each_boards_regressions_against_the_previous_release():
    before = columns((1.0, 1.0, 1.0), iterations=5)    # Mann-Whitney: p < 0.05 needs 4+ a side
    after = columns((1.0, 1.0, 1.0), iterations=5)
    after[1] = Column("qemu-arm64-a53", run_doc("qemu-arm64-a53", 0.7, 5))   # 30 % slower
    changes = release_changes(before, after, RegressionPolicy())
    by = {c.column: c for c in changes}
    assert {c.verdict for c in by["qemu-x86"].comparisons} == {"unchanged"}
    slower = {c.key: c for c in by["qemu-arm64-a53"].comparisons}
    dhry = slower["dhrystone_per_second (DhrystoneP)"]
    assert dhry.verdict == "regressed" and dhry.change == pytest.approx(-0.3, abs=0.01)
    latency = slower["dmatest-ddr-to-ddr-block-copy-512-nc-latency (us)"]
    assert latency.verdict == "improved"            # 0.7x the time: lower is better
    md = changes_md("11.02", "11.01", changes, RegressionPolicy().describe())
    assert "| Metric | 11.01 | 11.02 | Change | Verdict |" in md
    assert "| dhrystone_per_second (DhrystoneP) |" in md and "| -30.0% | regressed |" in md
    assert md.index("## qemu-x86\n") < md.index("## qemu-arm64-a53\n")
    assert '<tr class="regressed">' in changes_html("11.02", "11.01", changes, "rule")


def test_a_column_missing_on_either_side_is_reported_not_compared():
    before = columns()
    after = columns()
    before[2] = Column("qemu-x86-gpu", None, "BoardTaken: no free board")
    after[0] = Column("qemu-x86", None, "RunFailed: timeout")
    by = {c.column: c for c in release_changes(before, after)}
    assert by["qemu-x86"].missing == "RunFailed: timeout"
    assert by["qemu-x86-gpu"].missing == "missing in the previous release (BoardTaken: no free board)"
    assert by["qemu-arm64-a53"].comparisons and not by["qemu-arm64-a53"].missing


def test_changes_say_which_boards_booted_other_software():
    before, after = columns(), columns()
    for cols, software, release in ((before, None, "6.1.0-56-arm64"),
                                    (after, {"name": "cloud-arm64", "kernel": {"sha256": "d418ce578d1c" + "0" * 52}},
                                     "6.1.0-56-cloud-arm64")):
        cols[1].doc["provenance"] = {"kernelRelease": release,
                                     **({"software": software} if software else {})}
    for cols in (before, after):
        cols[0].doc["provenance"] = {"kernelRelease": "6.1.0-56-amd64"}
    md = changes_md("11.02", "11.01", release_changes(before, after), "rule")
    arm = md.split("## qemu-arm64-a53\n", 1)[1].split("\n## ", 1)[0]
    assert ("**The board booted other software**: the board's own image, Linux 6.1.0-56-arm64 in "
            "11.01, cloud-arm64 (kernel d418ce578d1c), Linux 6.1.0-56-cloud-arm64 in 11.02.") in arm
    x86 = md.split("## qemu-x86\n", 1)[1].split("\n## ", 1)[0]
    assert "Same software in both: the board's own image, Linux 6.1.0-56-amd64." in x86
