"""Reports in the guides' own table shapes, so a report and a guide line up metric by metric: the
shapes' titles and column labels are the guides', a report imported as a guide gives back every
metric it was made from, and `compare` of a run with a real guide lines up each family it ran."""

from __future__ import annotations

import pytest

from benchfarm.core.guides.guide import read_guide
from benchfarm.core.readings import power
from benchfarm.core.statistics.regression import Sample, compare
from benchfarm.core.statistics.results import SuiteRecord, metrics_document, samples_by_metric_name
from benchfarm.core.statistics.stats import seed_format
from benchfarm.report.html import html
from benchfarm.report.tables import markdown, rst
from benchfarm.suites.base import Metric
from benchfarm.suites.registry import parse
from tests.conftest import guide, sample


def _series(step, name, unit, values):
    return {"step": step, "name": name, "unit": unit, "higherIsBetter": True, "values": values,
            "display": seed_format(values)}


DOC = {"run": {"board": "vb-x86-0", "namespace": "d", "name": "r"}, "series": [
    _series("openssl-aes", "openssl-aes-128-gcm-16B", "KB/s", [100.0, 110.0]),
    _series("openssl-aes", "openssl-aes-128-gcm-1024B", "KB/s", [2000.0, 2100.0]),
    _series("openssl-rsa", "openssl-rsa2048-sign", "sign/s", [30.0, 32.0]),
    _series("rt", "cyclictest-t0-min", "us", [5.0, 6.0]),
    _series("rt", "cyclictest-t1-min", "us", [4.0, 4.0]),
    _series("rt", "cyclictest-t0-max", "us", [60.0, 70.0]),
    _series("rt", "cyclictest-t1-max", "us", [50.0, 52.0]),
    _series("rt", "cyclictest-max", "us", [70.0, 60.0])]}


def test_openssl_by_algorithm_and_buffer_size_and_cyclictest_per_core():
    text = rst(DOC)
    assert '.. csv-table:: OpenSSL Performance' in text
    assert '"Algorithm","Buffer Size (in bytes)","vb-x86-0: throughput (KBytes/Sec)"' in text
    assert '"aes-128-gcm","16","105.00 (min 100.00, max 110.00)"' in text
    assert '"Latencies","vb-x86-0:per-core"' in text
    assert '"Minimum (usec)","6,4"' in text and '"Maximum (usec)","65,51"' in text
    md = markdown(DOC)
    assert "| aes-128-gcm | 1024 | 2050.00 (min 2000.00, max 2100.00) |" in md
    assert "| Maximum (usec) | 65,51 |" in md
    assert "| openssl-rsa2048-sign (sign/s) |" in md      # no guide shape: the generic table


def test_the_report_imported_as_a_guide_gives_back_the_metrics_it_was_made_from():
    guide_ = read_guide(rst(DOC))
    assert guide_.problems == []
    assert set(guide_.baseline("vb-x86-0")) == {f"{s['name']} ({s['unit']})" for s in DOC["series"]}


def test_a_table_import_guide_would_name_otherwise_stays_in_the_generic_table():
    doc = {"run": {"board": "b-1"}, "series": [
        _series("fio", "fio-Rand Read-4k-read-throughput", "MB/s", [240.0]),   # --name="Rand Read"
        _series("fio", "fio-randread-4k-read-throughput", "MB/s", [250.0]),
        _series("fio-again", "fio-randread-4k-read-throughput", "MB/s", [260.0])]}
    text = rst(doc)
    assert '"fio-Rand Read-4k-read-throughput (MB/s)","240"' in text
    assert '   "4k","","","250",""' in text                                 # the first step's
    assert '"fio-randread-4k-read-throughput (MB/s)","260"' in text          # the second: generic
    assert set(read_guide(text).baseline("b-1")) == {
        "fio-Rand Read-4k-read-throughput (MB/s)", "fio-randread-4k-read-throughput (MB/s)"}


# A run of every family with a guide shape, from real outputs (tests/data/samples/INDEX.md) and
# netperf KEY=VALUE lines; two iterations, the second 10 % slower on every suite.
NETPERF_TCP = "THROUGHPUT=941.23\nTHROUGHPUT_UNITS=10^6bits/s\nLOCAL_CPU_UTIL=67.11\nPROTOCOL=TCP\n"
NETPERF_UDP = ("THROUGHPUT={mbit}\nTHROUGHPUT_UNITS=10^6bits/s\nLOCAL_CPU_UTIL=36.5\n"
               "LOCAL_SEND_SIZE={size}\nPROTOCOL=UDP\n")
EGRESS = "cpsw2g-udp-egress-throughput-0-loss"
STEPS = [   # step, suite, output, parameters
    ("fio-write", "fio", sample("fio/emmc-ext4-fio-1g_write_1m_16M.json"), {}),
    ("fio-read", "fio", sample("fio/emmc-ext4-fio-1g_read_1m_16M.json"), {}),
    ("fio-randread", "fio", sample("fio/randread_4k_64M_5s.json"), {}),
    ("dd-write", "dd", sample("dd/time_p_bs102400_count1280_write.txt"), {"table": "emmc-ext4"}),
    ("dd-read", "dd", sample("dd/time_p_bs102400_read.txt"),
     {"table": "emmc-ext4", "direction": "read"}),
    ("netperf-tcp", "netperf", NETPERF_TCP, {"table": "cpsw2g-tcp-bidirectional-throughput"}),
    ("netperf-udp-64", "netperf", NETPERF_UDP.format(mbit=44.1, size=18), {"table": EGRESS}),
    ("netperf-udp-1518", "netperf", NETPERF_UDP.format(mbit=208.4, size=1472), {"table": EGRESS}),
    ("iperf3-tcp", "iperf3", sample("iperf3/tcp_loopback_3s.json"), {}),
    ("openssl-cbc", "openssl", sample("openssl/speed_evp_aes-128-cbc.stdout.txt"), {}),
    ("openssl-rsa", "openssl", sample("openssl/speed_rsa2048.txt"), {}),
    ("rt-idle", "cyclictest", sample("cyclictest/plain_t2_p99_i1000_l5000.txt"), {}),
]
RAILS = [power.RailSummary("vdd_core", 0.75, 210.0, 200.0, 230.0, 20),
         power.RailSummary("soc_dvdd_3v3", 3.29, 32.0, 31.0, 33.0, 20)]
ASLEEP = [power.RailSummary("vdd_core", 0.75, 4.88, 4.8, 5.0, 20),
          power.RailSummary("soc_dvdd_3v3", 3.29, 2.5, 2.4, 2.6, 20)]


def _run_doc() -> dict:
    records = []
    for i, scale in ((1, 1.0), (2, 0.9)):
        for step, suite, text, params in STEPS:
            records.append(SuiteRecord(step, suite, i, False, 0, 1.0, [
                Metric(m.name, round(m.value * scale, 3), m.unit, m.higher_is_better)
                for m in parse(suite, text, params)]))
        records.append(SuiteRecord("low-power", "low-power", i, False, 0, 1.0,
                                   power.metrics("active", RAILS) + power.metrics("deep-sleep",
                                                                                  ASLEEP)))
    boots = [{"kernel-to-prompt": 2.2, "power-to-prompt": 3.1},
             {"kernel-to-prompt": 2.4, "power-to-prompt": 3.3}]
    return metrics_document({"board": "vb-x86-0", "namespace": "d", "name": "all"}, boots, records)


def test_every_shape_in_rst_carries_the_guides_titles_and_column_labels():
    text = rst(_run_doc())
    b = "vb-x86-0"
    assert (f'   :header: "Buffer size (bytes)","{b}: Write Throughput (Mbytes/sec)",'
            f'"{b}: Write CPU Load (%)","{b}: Read Throughput (Mbytes/sec)",'
            f'"{b}: Read CPU Load (%)"') in text
    # fio job emmc-ext4-fio-1g, 1m: write 342.39 MB/s at 60.42 % CPU, read 2097.15 at 57.14 %
    assert ".. csv-table:: fio emmc-ext4-fio-1g" in text
    assert ('"1m","325.27 (min 308.15, max 342.39)","57.40 (min 54.38, max 60.42)",'
            '"1992.29 (min 1887.43, max 2097.15)","54.28 (min 51.43, max 57.14)"') in text
    assert '"4k","","","236.58 (min 224.13, max 249.03)","44.94 (min 42.57, max 47.30)"' in text
    assert ".. csv-table:: dd emmc-ext4" in text
    assert ('"102400","166.25 (min 157.50, max 175.00)","26.60 (min 25.20, max 28.00)",'
            '"1520.00 (min 1440.00, max 1600.00)","11.88 (min 11.25, max 12.50)"') in text
    assert f".. csv-table:: netperf {EGRESS}" in text
    assert (f'   :header: "Frame Size(bytes)","{b}: THROUGHPUT (Mbits/sec)",'
            f'"{b}: CPU Load % (LOCAL_CPU_UTIL)"') in text
    assert '"64","41.89 (min 39.69, max 44.10)","34.67 (min 32.85, max 36.50)"' in text
    assert text.index('"64","41.89') < text.index('"1518","197.98')        # by frame size
    assert ".. csv-table:: netperf cpsw2g-tcp-bidirectional-throughput" in text
    assert '"netperf-tcp","894.17 (min 847.11, max 941.23)","63.75 (min 60.40, max 67.11)"' in text
    assert ".. csv-table:: iperf3" in text
    assert (f'   :header: "Command Used","{b}: THROUGHPUT (Mbits/sec)",'
            f'"{b}: CPU Load % (LOCAL_CPU_UTIL)","{b}: CPU Load % (REMOTE_CPU_UTIL)"') in text
    assert '"iperf3-tcp","19468.44 (min 18443.78, max 20493.09)",' in text
    for mode in ("active", "deep-sleep"):
        assert f".. csv-table:: {mode} Power Performance" in text
    assert '"vdd_core","0.75","4.88"' in text and '"Total","","7.38"' in text
    assert ".. csv-table:: Linux boot time" in text
    assert (f'   :header: "Boot Configuration","{b}: Boot time in seconds: avg(min,max)"'
            in text)
    assert '"kernel-to-prompt","2.30 (min 2.20, max 2.40)"' in text


def test_every_shape_imported_back_gives_each_metric_it_was_made_from():
    doc = _run_doc()
    imported = read_guide(rst(doc))
    assert imported.problems == []
    back = imported.baseline("vb-x86-0")
    made_from = {f"{s['name']} ({s['unit']})" for s in doc["series"]}
    assert set(back) == made_from | {"kernel-to-prompt (s)", "power-to-prompt (s)"}
    for s in doc["series"]:       # each value comes back (cyclictest per core: rounded to 1 us)
        key, mean = f"{s['name']} ({s['unit']})", sum(s["values"]) / len(s["values"])
        assert back[key].mean == pytest.approx(mean, abs=0.5 if "cyclictest-t" in key else 0.006)


def test_markdown_and_html_show_the_same_shapes():
    doc = _run_doc()
    md, page = markdown(doc), html(doc)
    assert "## fio-write: fio emmc-ext4-fio-1g" in md
    assert "| Buffer size (bytes) | vb-x86-0: Write Throughput (Mbytes/sec) |" in md
    assert "| 102400 | 166.25 (min 157.50, max 175.00) | 26.60 (min 25.20, max 28.00) |" in md
    assert "## low-power: deep-sleep Power Performance" in md and "| Total |  | 7.38 |" in md
    assert "| kernel-to-prompt | 2.30 (min 2.20, max 2.40) |" in md
    assert "| rail-vdd_core-deep-sleep-min (mW) | 4.80 |" in md    # window min: generic table
    assert "<h2>dd-write: dd emmc-ext4</h2>" in page
    assert "<th>vb-x86-0: Read CPU Load (%)</th>" in page
    assert '<td>1518</td><td class="num">197.98 (min 187.56, max 208.40)</td>' in page
    assert "<h2>low-power: active Power Performance</h2>" in page
    assert '<td>Total</td><td class="num"></td><td class="num">242</td>' in page
    assert "<h2>Boot time: Linux boot time</h2>" in page


# Families of the run above, each by a metric-name prefix, and the guides they are in
FAMILIES = {"fio/dd": ("fio-", "dd-"), "network": ("netperf-",), "openssl": ("openssl-",),
            "cyclictest": ("cyclictest-",), "boot": ("kernel-to-prompt",),
            "rails": ("rail-",)}


@pytest.mark.parametrize("name,board,families", [
    ("ti_am62x_linux_performance_guide.rst", "am62xx_sk-fs",
     {"fio/dd", "network", "openssl", "boot", "rails"}),
    ("ti_am64x_rt_linux_performance_guide.rst", None,
     {"fio/dd", "network", "openssl", "cyclictest", "boot"}),
])
def test_compare_with_a_real_guide_lines_up_every_family_the_run_measured(name, board, families):
    """What `benchfarm compare RUN GUIDE --board B` compares; the run measured all six families,
    each guide has tables for those listed (AM62x has no cyclictest, AM64x RT no rails)."""
    base = {k: Sample.summary(v.mean, v.min, v.max)
            for k, v in read_guide(guide(name)).baseline(board).items()}
    current, direction = samples_by_metric_name(_run_doc())
    keys = {c.key for c in compare(base, current, direction)}
    lined_up = {family for family, prefixes in FAMILIES.items()
                if any(k.startswith(prefixes) for k in keys)}
    assert lined_up == families
    assert {"fio-emmc-ext4-fio-1g-1m-write-cpu-load (%)",
            "dd-emmc-ext4-102400-read-throughput (MB/s)",
            "netperf-cpsw2g-tcp-bidirectional-throughput-local-cpu-util (%)",
            "openssl-aes-128-cbc-16384B (KB/s)", "kernel-to-prompt (s)"} <= keys
    if "rails" in families:
        assert {"rail-vdd_core-deep-sleep (mW)", "rail-total-deep-sleep (mW)",
                f"netperf-{EGRESS}-1518-throughput (Mbit/s)"} <= keys
    if "cyclictest" in families:
        assert {"cyclictest-t0-max (us)", "cyclictest-t1-avg (us)"} <= keys


def test_the_boot_section_shows_the_kernel_clock_and_retried_boots():
    from benchfarm.core.readings.boot import timeline_from_chunks
    chunks = [(10.551, b"[    0.000000] Linux version 6.1\r\n[    0.100000] a\r\n"),
              (10.701, b"[    0.400000] c\r\n"), (11.203, b"[    0.900000] Run /init as init\r\n"),
              (11.500, b"root@vb:~# ")]
    tl = timeline_from_chunks(10.0, chunks, {"kernel": "Linux version", "init": "Run /init"},
                              r"root@\S+:\S*# ")
    phases = tl.phases({"kernel-to-prompt": ("kernel", "prompt")})
    doc = metrics_document({"board": "vb-x86-0", "namespace": "d", "name": "r"},
                           [phases, phases], [])
    doc["kernelClocks"] = [tl.kernel.as_dict(), None]
    doc["bootRetries"] = {"2": ["BootFailed: vb-x86-0: boot failed: Kernel panic - not syncing"]}
    md = markdown(doc)
    row = next(line for line in md.splitlines() if line.startswith("| 1 | 0.301 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # boot, zero, rate, stamped lines, held, live median/p95, after a pause: lines, median, p95
    assert cells == ["1", "0.301", "1.0000", "3", "1", "2", "2", "1", "2", "2"], cells
    assert "Boot 2 took 2 power cycles; the failed attempts: BootFailed: vb-x86-0: boot failed: " \
           "Kernel panic" in md


def _fills(svg: str) -> dict[str, str]:
    """SVG id -> the fill of the first path in that group (written `style="fill: #…"`)."""
    import re
    return {m.group(1): m.group(2) for m in re.finditer(
        r'<g id="([^"]+)">\s*<path [^>]*?style="fill: (#[0-9a-f]{6})', svg)}


def test_the_boot_timeline_gives_each_stage_one_colour_in_every_boot_and_in_the_legend():
    from benchfarm.report.html import STAGE_COLOURS, boot_plot
    boots = [{"power-on": 0.0, "first-byte": 0.7 + i / 10, "kernel": 0.8 + i / 10,
              "init": 3.5, "userspace": 4.6, "prompt": 4.7} for i in range(3)]
    boots[1].pop("kernel")            # a boot that lacks a stage must not shift the others' colours
    svg = boot_plot({"bootEvents": boots})
    fills = _fills(svg)
    for stage, colour in STAGE_COLOURS.items():
        got = {fills[f"boot{i}-{stage}"] for i in (1, 2, 3) if f"boot{i}-{stage}" in fills}
        assert got == {colour}, (stage, got)
    assert "boot2-kernel" not in fills and "boot3-kernel" in fills
    legend = svg[svg.index('<g id="boot-legend">'):]
    assert [c for c in STAGE_COLOURS.values() if f"fill: {c}" in legend] == \
        list(STAGE_COLOURS.values())
    assert len(set(STAGE_COLOURS.values())) == len(STAGE_COLOURS)


def test_the_boot_timeline_puts_each_bar_where_its_stages_ended_and_the_legend_above_them():
    """Drawn by hand (report.svg): each segment runs from the stage before to its own marker
    on one axis for every boot, whose ticks cover the longest boot; the legend is above the plot
    area."""
    import re

    from benchfarm.report.html import TOP, boot_plot
    boots = [{"first-byte": 0.5, "kernel": 1.0, "prompt": 4.0},
             {"first-byte": 0.5, "kernel": 2.0, "prompt": 8.0}]
    svg = boot_plot({"bootEvents": boots})
    seg = {m[1]: (float(m[2]), float(m[4])) for m in re.finditer(
        r'<g id="(boot\d-[a-z-]+)"><path d="M ([\d.]+) ([\d.]+) h ([\d.]+)', svg)}
    scale = (seg["boot2-prompt"][0] + seg["boot2-prompt"][1] - seg["boot2-first-byte"][0]) / 8.0
    assert abs(seg["boot1-kernel"][1] - 0.5 * scale) < 0.05          # 0.5 s -> 1.0 s
    assert abs(seg["boot2-prompt"][1] - 6.0 * scale) < 0.05          # 2.0 s -> 8.0 s
    assert seg["boot1-first-byte"][0] == seg["boot2-first-byte"][0]  # both from power-on
    ticks = [float(t) for t in re.findall(r'text-anchor="middle">([\d.]+)</text>', svg)]
    assert ticks[0] == 0 and ticks[-1] >= 8.0
    legend_y = [float(y) for y in re.findall(r'M [\d.]+ ([\d.]+) h 12\.00 v 12\.00', svg)]
    assert len(legend_y) == 3 and max(legend_y) + 12 <= TOP           # a key per stage drawn
    assert boot_plot({"bootEvents": []}) is None
