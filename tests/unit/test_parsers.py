"""Each parser against real outputs from tests/data/samples: the numbers a person reads off them."""

from __future__ import annotations

import pytest

from benchfarm.errors import ParseError, RunError
from benchfarm.suites.registry import names, parse
from tests.conftest import guide, sample


def values(metrics):
    return {m.name: (m.value, m.unit) for m in metrics}


def test_cyclictest_normal_output_takes_each_threads_final_line():
    m = values(parse("cyclictest", sample("cyclictest/plain_t2_p99_i1000_l5000.txt")))
    assert m["cyclictest-t0-min"] == (7, "us")
    assert m["cyclictest-t0-avg"] == (38, "us")
    assert m["cyclictest-t0-max"] == (28792, "us")
    assert m["cyclictest-t1-max"] == (29223, "us")
    assert m["cyclictest-max"] == (29223, "us")
    assert m["cyclictest-min"] == (7, "us")


def test_cyclictest_quiet():
    m = values(parse("cyclictest", sample("cyclictest/quiet_t2_p99_i1000_l5000.txt")))
    assert m["cyclictest-t0-max"] == (2163, "us")
    assert m["cyclictest-t1-min"] == (10, "us")
    assert m["cyclictest-avg"] == (24.0, "us")


def test_cyclictest_histogram_summary_and_buckets():
    metrics = parse("cyclictest", sample("cyclictest/hist100_quiet_t2_p99_i1000_l5000.txt"))
    m = values(metrics)
    assert m["cyclictest-t0-max"] == (8600, "us")
    assert m["cyclictest-t1-max"] == (3323, "us")
    assert m["cyclictest-t1-avg"] == (94, "us")
    assert m["cyclictest-hist-97us"] == (4, "samples")  # 000097 000002 000002
    assert m["cyclictest-hist-98us"] == (1, "samples")


def test_cyclictest_rt_report_dump_in_seed_002():
    m = values(parse("cyclictest", guide("002_rk3568_cyclictest_dump.txt")))
    assert m["cyclictest-t0-max"] == (75, "us")
    assert m["cyclictest-t0-min"] == (8, "us")


def test_hackbench():
    assert values(parse("hackbench", sample("hackbench/default.txt")))["hackbench-time"] == (0.836, "s")


def test_sysbench_cpu_and_memory():
    cpu = values(parse("sysbench", sample("sysbench/cpu.txt")))
    assert cpu["sysbench-cpu-events"] == (4372.06, "events/s")
    assert cpu["sysbench-latency-p95"] == (0.25, "ms")
    mem = values(parse("sysbench", sample("sysbench/memory.txt")))
    assert mem["sysbench-memory-bw"] == (6845.42, "MiB/s")
    assert mem["sysbench-memory-ops"] == (7009715.20, "ops/s")


def test_mbw_avg_lines():
    m = values(parse("mbw", sample("mbw/mbw_64.txt")))
    assert m["mbw-mcblock"] == (13651.004, "MiB/s")
    assert set(m) == {"mbw-memcpy", "mbw-dumb", "mbw-mcblock"}


def test_stress_ng_metrics_brief():
    m = values(parse("stress-ng", sample("stress-ng/cpu2_metrics-brief_5s.txt")))
    assert m["stress-ng-cpu-bogo-ops"] == (9980, "bogo ops")
    assert m["stress-ng-cpu"] == (1995.77, "bogo ops/s")
    assert m["stress-ng-cpu-cpu"] == (1679.43, "bogo ops/s")


def test_openssl_symmetric_table_and_rsa():
    m = values(parse("openssl", sample("openssl/speed_evp_aes-128-gcm.stdout.txt")))
    assert m["openssl-aes-128-gcm-16B"] == (41159.50, "KB/s")
    assert m["openssl-aes-128-gcm-16384B"] == (3589259.26, "KB/s")
    rsa = values(parse("openssl", sample("openssl/speed_rsa2048.txt")))
    assert rsa["openssl-rsa2048-sign"] == (3110.0, "ops/s")
    assert rsa["openssl-rsa2048-verify"] == (47296.0, "ops/s")
    multi = values(parse("openssl", sample("openssl/speed_multi2_rsa2048.txt")))
    assert multi["openssl-rsa2048-sign"] == (7648.0, "ops/s")


def test_fio_json():
    m = values(parse("fio", sample("fio/randread_4k_64M_5s.json")))
    assert m["fio-randread-read-iops"] == (60797.84, "IOPS")
    assert m["fio-randread-read-bw"] == (243191, "KiB/s")
    assert m["fio-randread-read-clat-mean"] == (257.13, "us")
    assert not any("write" in k for k in m)


def test_iperf3_json():
    m = values(parse("iperf3", sample("iperf3/tcp_loopback_3s.json")))
    assert m["iperf3-sent"] == (20512.78, "Mbit/s")
    assert m["iperf3-received"] == (20493.09, "Mbit/s")


def test_dd_gnu_and_busybox():
    gnu = "33554432 bytes (34 MB, 32 MiB) copied, 0.25 s, 134 MB/s\n"
    assert values(parse("dd", gnu))["dd-throughput"] == (134.0, "MB/s")
    bb = "32+0 records in\n32+0 records out\n33554432 bytes (32.0MB) copied, 0.514 seconds, 62.2MB/s\n"
    assert values(parse("dd", bb))["dd-throughput"] == (62.2, "MB/s")


@pytest.mark.parametrize("suite", ["cyclictest", "hackbench", "sysbench", "mbw", "stress-ng", "lmbench",
                                   "dhrystone", "whetstone", "linpack", "nbench", "stream", "coremark",
                                   "coremark-pro", "7zip", "glmark2", "netperf", "alsa", "multibench",
                                   "openssl", "fio", "iperf3", "dd", "boot-time"])
@pytest.mark.parametrize("text", ["", "garbage\nnot a benchmark\n", '{"truncated": '])
def test_garbage_is_a_parse_error_naming_the_suite(suite, text):
    with pytest.raises(ParseError) as err:
        parse(suite, text)
    assert suite in str(err.value)


def test_truncated_fio_json_names_a_line():
    text = sample("fio/randread_4k_64M_5s.json")
    with pytest.raises(ParseError) as err:
        parse("fio", text[: len(text) // 2])
    assert err.value.line is not None


def test_unknown_suite_is_a_run_error():
    with pytest.raises(RunError):
        parse("no-such-suite", "x")


def test_units_are_normalised():
    from benchfarm.suites.base import Metric
    assert Metric("bw", 1.0, "(mb/s)").key == Metric("bw", 2.0, "MB/s").key


def test_crd_suite_list_matches_parsers():
    from benchfarm.api.runs import SESSION_SUITES, SUITE_NAMES
    assert sorted(set(SUITE_NAMES) - SESSION_SUITES) == names()
