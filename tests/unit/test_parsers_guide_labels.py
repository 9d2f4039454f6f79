"""What the guides' storage and Ethernet tables are keyed by, carried in the metric names: buffer
size, direction and CPU load for fio and dd, CPU load and UDP frame size for netperf and iperf3.
Real outputs in tests/data/samples (see its INDEX.md); netperf's KEY=VALUE lines are written out."""

from __future__ import annotations

import json

import pytest

from benchfarm.errors import ParseError
from benchfarm.suites.registry import check_parameters, parse
from tests.conftest import sample


def values(metrics):
    return {m.name: (m.value, m.unit) for m in metrics}


def test_fio_throughput_and_cpu_load_by_job_buffer_size_and_direction():
    write = values(parse("fio", sample("fio/emmc-ext4-fio-1g_write_1m_16M.json")))
    assert write["fio-emmc-ext4-fio-1g-1m-write-throughput"] == (342.39, "MB/s")  # bw_bytes/1e6
    assert write["fio-emmc-ext4-fio-1g-1m-write-cpu-load"] == (60.42, "%")  # 6.25 usr + 54.17 sys
    assert write["fio-emmc-ext4-fio-1g-write-bw"] == (334367, "KiB/s")      # fio's own, as before
    read = values(parse("fio", sample("fio/emmc-ext4-fio-1g_read_1m_16M.json")))
    assert read["fio-emmc-ext4-fio-1g-1m-read-throughput"] == (2097.15, "MB/s")
    assert read["fio-emmc-ext4-fio-1g-1m-read-cpu-load"] == (57.14, "%")
    assert not any("write" in name for name in read)
    rand = values(parse("fio", sample("fio/randread_4k_64M_5s.json")))
    assert rand["fio-randread-4k-read-throughput"] == (249.03, "MB/s")
    assert rand["fio-randread-4k-read-cpu-load"] == (47.3, "%")


def test_fio_gives_no_cpu_load_per_direction_for_a_job_that_read_and_wrote():
    data = json.loads(sample("fio/emmc-ext4-fio-1g_write_1m_16M.json"))
    data["jobs"][0]["read"].update(io_bytes=1048576, bw_bytes=5000000)   # as if rw=rw
    m = values(parse("fio", json.dumps(data)))
    assert m["fio-emmc-ext4-fio-1g-1m-read-throughput"] == (5.0, "MB/s")
    assert not any(name.endswith("-cpu-load") for name in m)


def test_dd_for_a_guide_table_by_buffer_size_with_cpu_load_from_time():
    text = sample("dd/time_p_bs102400_count1280_write.txt")
    assert values(parse("dd", text)) == {"dd-throughput": (175.0, "MB/s")}   # no table: as before
    write = values(parse("dd", text, {"table": "emmc-ext4"}))
    assert write == {"dd-emmc-ext4-102400-write-throughput": (175.0, "MB/s"),  # 131072000 / 1280
                     "dd-emmc-ext4-102400-write-cpu-load": (28.0, "%")}      # (0.00 + 0.21) / 0.75
    read = values(parse("dd", sample("dd/time_p_bs102400_read.txt"),
                        {"table": "emmc-ext4", "direction": "read"}))
    assert read == {"dd-emmc-ext4-102400-read-throughput": (1600.0, "MB/s"),
                    "dd-emmc-ext4-102400-read-cpu-load": (12.5, "%")}


def test_dd_buffer_size_from_the_plan_when_records_do_not_tell_and_bash_time():
    text = ("1+1 records in\n1+1 records out\n1500 bytes (1.5 kB) copied, 0.5 s, 3.0 kB/s\n\n"
            "real\t0m0.500s\nuser\t0m0.100s\nsys\t0m0.150s\n")
    with pytest.raises(ParseError, match="parameters.bs"):
        parse("dd", text, {"table": "mmc-ext4"})
    assert values(parse("dd", text, {"table": "mmc-ext4", "bs": "1024"})) == {
        "dd-mmc-ext4-1024-write-throughput": (0.003, "MB/s"),
        "dd-mmc-ext4-1024-write-cpu-load": (50.0, "%")}
    with pytest.raises(ParseError, match="write or read"):
        parse("dd", text, {"table": "mmc-ext4", "bs": "1024", "direction": "rw"})


def test_netperf_table_parameter_and_udp_frame_size():
    udp = ("THROUGHPUT=712.23\nTHROUGHPUT_UNITS=10^6bits/s\nLOCAL_CPU_UTIL=74.48\n"
           "LOCAL_SEND_SIZE=1472\nPROTOCOL=UDP\n")
    assert values(parse("netperf", udp, {"table": "cpsw2g-udp-egress-throughput-0-loss"})) == {
        "netperf-cpsw2g-udp-egress-throughput-0-loss-1518-throughput": (712.23, "Mbit/s"),
        "netperf-cpsw2g-udp-egress-throughput-0-loss-1518-local-cpu-util": (74.48, "%")}
    assert "netperf-udp-64-throughput" in values(parse("netperf", udp.replace("1472", "18")))
    tcp = "THROUGHPUT=941.23\nTHROUGHPUT_UNITS=10^6bits/s\nLOCAL_CPU_UTIL=67.11\nPROTOCOL=TCP\n"
    assert values(parse("netperf", tcp)) == {"netperf-tcp-throughput": (941.23, "Mbit/s"),
                                             "netperf-tcp-local-cpu-util": (67.11, "%")}


def test_iperf3_json_cpu_load_of_both_ends():
    tcp = values(parse("iperf3", sample("iperf3/tcp_loopback_3s.json")))
    assert tcp["iperf3-local-cpu-util"] == (18.74, "%")     # host_total 18.737...
    assert tcp["iperf3-remote-cpu-util"] == (77.87, "%")
    udp = values(parse("iperf3", sample("iperf3/udp_loopback_4G_2s.json")))
    assert udp["iperf3-local-cpu-util"] == (9.35, "%")
    assert "iperf3-local-cpu-util" not in values(parse("iperf3",
                                                       sample("iperf3/tcp_loopback_2s.txt")))


def test_a_table_parameter_is_a_slugged_title_and_dd_knows_its_directions_at_admission():
    assert check_parameters("dd", {"table": "emmc-ext4", "direction": "read", "bs": "4k"}) is None
    assert check_parameters("netperf", {"table": "cpsw2g-udp-egress-throughput-0-loss"}) is None
    assert "slugged title" in check_parameters("dd", {"table": "EMMC EXT4"})
    assert "slugged title" in check_parameters("netperf", {"table": "cpsw2g--tcp"})
    assert "write or read" in check_parameters("dd", {"table": "emmc-ext4", "direction": "both"})
    assert "4k, 1m" in check_parameters("dd", {"table": "emmc-ext4", "bs": "1 MB"})
    with pytest.raises(ParseError, match="slugged title"):
        parse("netperf", "THROUGHPUT=1\n", {"table": "CPSW2g TCP"})
