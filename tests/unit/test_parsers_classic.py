"""The classic CPU/memory suites of the TI guides, against real outputs and the seeds' dumps."""

from __future__ import annotations

import pytest

from benchfarm.errors import ParseError
from benchfarm.suites.registry import parse
from tests.conftest import guide, sample


def values(metrics):
    return {m.name: (m.value, m.unit) for m in metrics}


def test_lmbench_bw_mem_needs_the_plans_op_and_names_like_ti():
    text = sample("lmbench/bw_mem_8M_bcopy.txt")
    assert values(parse("lmbench", text, {"tool": "bw_mem", "op": "bcopy"})) == {
        "bw_mem-bcopy-8mb": (29510.27, "MB/s")}
    with pytest.raises(ParseError, match="op="):
        parse("lmbench", text)


def test_lmbench_lat_mem_rd_sizes_follow_ti_names():
    m = values(parse("lmbench", sample("lmbench/lat_mem_rd_16_512.txt")))
    assert m["lat_mem_rd-stride512-sz16000k"] == (10.970, "ns")
    assert m["lat_mem_rd-stride512-sz490"] == (1.092, "ns")


def test_lmbench_lat_mem_rd_dump_inside_seed_000():
    m = values(parse("lmbench", guide("000_am62x_lat_mem_rd_dump.txt")))
    assert m["lat_mem_rd-stride512-sz62k"] == (8.980, "ns")
    assert m["lat_mem_rd-stride512-sz1000k"] == (179.407, "ns")
    assert m["lat_mem_rd-stride512-sz64000k"] == (209.947, "ns")
    assert len(m) == 33


def test_lmbench_one_liners_and_lat_ctx():
    assert values(parse("lmbench", sample("lmbench/lat_pipe.txt"))) == {"lat_pipe": (28.9335, "us")}
    assert values(parse("lmbench", sample("lmbench/lat_proc_fork.txt"))) == {
        "lat_proc-fork": (192.8367, "us")}
    assert values(parse("lmbench", sample("lmbench/lat_syscall_null.txt"))) == {
        "lat_syscall-null": (0.1660, "us")}
    assert values(parse("lmbench", sample("lmbench/lat_ctx_s128_2_4.txt"))) == {
        "lat_ctx-2-128k": (22.90, "us"), "lat_ctx-4-128k": (13.54, "us")}


def test_dhrystone_per_mhz_from_the_clock():
    m = values(parse("dhrystone", sample("dhrystone/dhry21_200M.txt"), {"cpuClockMHz": "2596"}))
    assert m["dhrystone_per_second"] == (56980056.0, "DhrystoneP")
    assert m["dhrystone_per_mhz"] == (round(56980056.0 / 1757 / 2596, 2), "DMIPS/MHz")
    with pytest.raises(ParseError, match="too small"):
        parse("dhrystone", sample("dhrystone/dhry21_20M_too_small.txt"))


def test_whetstone_linpack_stream_coremark():
    assert values(parse("whetstone", sample("whetstone/whetdc_1000000.txt"))) == {
        "whetstone": (20000.0, "MIPS")}
    assert values(parse("linpack", sample("linpack/linpack_200.txt"))) == {
        "linpack": (5706863.518, "KFLOPS")}
    assert values(parse("stream", sample("stream/stream_c_omp_default.txt"))) == {
        "copy": (30574.9, "MB/s"), "scale": (35335.3, "MB/s"), "add": (36412.8, "MB/s"),
        "triad": (35335.3, "MB/s")}
    assert values(parse("coremark", sample("coremark/coremark_perf_0x0.txt"))) == {
        "coremark": (31665.611146, "iter/s")}


def test_nbench_iterations_and_linux_indexes():
    m = values(parse("nbench", sample("nbench/nbench_minseconds1.txt")))
    assert m["numeric_sort"] == (2304.7, "iterations")
    assert m["lu_decomposition"] == (5257.2, "iterations")
    assert m["nbench-memory-index"] == (129.558, "")
    assert m["nbench-floating-point-index"] == (172.158, "")


def test_coremark_pro_single_and_multi_core():
    m = values(parse("coremark-pro", sample("coremark-pro/certify-all_c2.txt")))
    assert m["coremark-pro"] == (7936.24, "")
    assert m["coremark-pro-multicore"] == (13948.12, "")
    assert m["zip-test"] == (200.00, "workloads/")
    assert m["sha-test-multicore"] == (714.29, "workloads/")


def test_7zip_and_glmark2():
    z = values(parse("7zip", sample("7zip/b_3_md20.txt")))
    assert z["7zip-total-rating"] == (9942, "MIPS") and z["7zip-compress-rating"] == (12006, "MIPS")
    assert z["7zip-total-usage"] == (158, "%") and z["7zip-total-ru"] == (6429, "MIPS")
    g = values(parse("glmark2", sample("glmark2/gl_offscreen_subset.txt")))
    assert g["glmark2-build"] == (560, "FPS")
    assert g["glmark2-shading-phong"] == (177, "FPS")
    assert "glmark2-score" in g


def test_fps_parser_for_kanzi_style_lines():
    m = values(parse("fps", "Kanzi cluster demo 1920x1080\nAverage FPS: 58.7\n",
                     {"scene": "cluster", "resolution": "1920x1080"}))
    assert m == {"fps-cluster-1920x1080": (58.7, "FPS")}


def test_console_timing_converts_cycles_at_the_given_clock_as_in_seed_003():
    table = guide("003_c6000_dsp_bios_timings.txt")
    m = values(parse("console-timing", table, {"clockMHz": "200"}))
    assert m["LOG_event-cycles"] == (30, "cycles")
    assert m["LOG_event"] == (0.15, "us")        # the guide's 0.150 us
    assert m["STS_delta"] == (0.105, "us")
    assert m["TSK_yield"] == (1.16, "us")         # 232 cycles, the guide's 1.160 us
    with pytest.raises(ParseError, match="clockMHz"):
        parse("console-timing", table)


def test_netperf_alsa_multibench():
    n = values(parse("netperf", "THROUGHPUT=941.23\nTHROUGHPUT_UNITS=10^6bits/s\nPROTOCOL=TCP\n"))
    assert n == {"netperf-tcp-throughput": (941.23, "Mbit/s")}
    a = values(parse("alsa", '"48000","1535980.91","0.75"\n'))
    assert a["alsa-capture-48000hz-throughput"] == (1535980.91, "bits/s")
    assert values(parse("alsa", "rate=44100 bytes=1764000 seconds=10\n"))[
        "alsa-capture-44100hz-throughput"] == (1411200.0, "bits/s")
    assert values(parse("multibench", "4m-check 280.25\n"))["4m-check"] == (280.25, "workloads/")
