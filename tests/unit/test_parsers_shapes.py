"""Output shapes people produce besides the default ones (cyclictest --json, openssl -multi/-mr,
iperf3 UDP, stress-ng counts, 7-Zip's Tot: line), against real outputs in tests/data/samples."""

from __future__ import annotations

import pytest

from benchfarm.errors import ParseError
from benchfarm.suites.registry import parse
from tests.conftest import sample


def values(metrics):
    return {m.name: (m.value, m.unit) for m in metrics}


def test_cyclictest_json_file_gives_the_text_parsers_names():
    m = values(parse("cyclictest", sample("cyclictest/json_t2_p99_i1000_l2000.json")))
    assert m["cyclictest-t0-min"] == (8, "us")
    assert m["cyclictest-t0-avg"] == (15.86, "us")
    assert m["cyclictest-t0-max"] == (2779, "us")
    assert m["cyclictest-t1-min"] == (9, "us")
    assert m["cyclictest-t1-avg"] == (15.93, "us")
    assert m["cyclictest-t1-max"] == (298, "us")
    assert m["cyclictest-min"] == (8, "us")
    assert m["cyclictest-max"] == (2779, "us")
    assert m["cyclictest-avg"][0] == pytest.approx(15.895, abs=0.005)
    assert not any("hist" in k for k in m)  # run without -h: empty histograms


def test_cyclictest_json_histogram_buckets_sum_the_threads():
    m = values(parse("cyclictest", sample("cyclictest/json_hist50_t2_p99_i1000_l2000.json")))
    assert m["cyclictest-t0-max"] == (461, "us")
    assert m["cyclictest-t1-max"] == (441, "us")
    assert m["cyclictest-t1-avg"] == (14.54, "us")
    assert m["cyclictest-min"] == (9, "us")
    assert m["cyclictest-hist-9us"] == (1, "samples")      # thread 1 only
    assert m["cyclictest-hist-13us"] == (1024, "samples")  # 555 + 469
    assert m["cyclictest-hist-14us"] == (1737, "samples")  # 601 + 1136
    assert m["cyclictest-hist-49us"] == (1, "samples")     # thread 0 only
    assert "cyclictest-hist-48us" not in m


@pytest.mark.parametrize("text, message", [
    ('{"file_version": 1, "return_code": 1}', "no 'thread' results"),
    ('{"thread": {"0": {"min": 3, "max": 9}}}', "thread '0'"),
    ('{"thread": {"0": {"min": 3, "avg": 4, "max": 9, "histogram": {"x": 1}}}}', "thread '0'"),
])
def test_cyclictest_json_of_another_shape_is_a_parse_error(text, message):
    with pytest.raises(ParseError, match=message):
        parse("cyclictest", text)


def test_openssl_multi_table_without_type_header_takes_sizes_from_the_children():
    m = values(parse("openssl", sample("openssl/speed_multi2_evp_aes-128-gcm.txt")))
    assert m["openssl-aes-128-gcm-16B"] == (98738.88, "KB/s")
    assert m["openssl-aes-128-gcm-1024B"] == (4068083.71, "KB/s")
    assert m["openssl-aes-128-gcm-16384B"] == (10005413.89, "KB/s")
    assert len(m) == 6  # the children's 'Got: +F:' lines are not results


def test_openssl_figures_under_10000_bytes_per_second_are_printed_without_k():
    """openssl speed prints `%11.2fk` only over 10,000 bytes/s: a loaded board's 16-byte blocks
    under `-seconds 1` may finish none (0.00), a slow one a few thousand bytes (seen on the GPU
    board while three boards ran at once)."""
    table = ("type             16 bytes     64 bytes    256 bytes   1024 bytes   8192 bytes  16384 bytes\n"
             "AES-128-GCM          0.00      9512.00      2331.90k     6396.93k     3284.99k     2634.29k\n")
    m = values(parse("openssl", table))
    assert m["openssl-aes-128-gcm-16B"] == (0.0, "KB/s")
    assert m["openssl-aes-128-gcm-64B"] == (9.51, "KB/s")
    assert m["openssl-aes-128-gcm-256B"] == (2331.9, "KB/s")
    nan = values(parse("openssl", table.replace("0.00  ", "-nan  ")))      # 0 blocks in 0 s
    assert "openssl-aes-128-gcm-16B" not in nan and nan["openssl-aes-128-gcm-64B"] == (9.51, "KB/s")


def test_openssl_an_infinite_cell_is_no_figure_and_the_rest_of_its_row_counts():
    """vb-x86-1, 5 s after its boot: the 16-byte blocks ran while the kernel's random pool came
    up (its line in the middle of openssl's), 3293 of them 'in 0.00s', printed 'infk'."""
    m = values(parse("openssl", sample("openssl/speed_elapsed_aes-128-cbc_inf_after_boot.stdout.txt")))
    assert "openssl-aes-128-cbc-16B" not in m
    assert m["openssl-aes-128-cbc-64B"] == (44522.43, "KB/s")
    assert m["openssl-aes-128-cbc-16384B"] == (76414.98, "KB/s")
    assert len(m) == 5


def test_openssl_multi_mr_lines_give_the_same_names_in_kb_per_s():
    m = values(parse("openssl", sample("openssl/speed_multi2_mr_evp_aes-128-gcm.stdout.txt")))
    assert m["openssl-aes-128-gcm-16B"] == (94753.33, "KB/s")         # 94753328.00 bytes/s
    assert m["openssl-aes-128-gcm-16384B"] == (10046439.42, "KB/s")   # 10046439424.00 bytes/s
    assert len(m) == 6
    pkey = values(parse("openssl", sample("openssl/speed_multi2_mr_rsa2048_ed25519.stdout.txt")))
    assert pkey == {"openssl-rsa2048-sign": (5421.461538, "ops/s"),
                    "openssl-rsa2048-verify": (107868.0, "ops/s"),
                    "openssl-eddsa-Ed25519-sign": (60224.0, "ops/s"),
                    "openssl-eddsa-Ed25519-verify": (28332.0, "ops/s")}


def test_openssl_multi_public_key_table_names_match_the_mr_ones():
    m = values(parse("openssl", sample("openssl/speed_multi2_rsa2048_ecdsap256_ed25519.stdout.txt")))
    assert m["openssl-rsa2048-sign"] == (8185.0, "ops/s")
    assert m["openssl-ecdsa-nistp256-verify"] == (45574.0, "ops/s")
    assert m["openssl-eddsa-Ed25519-sign"] == (81970.0, "ops/s")


def test_openssl_mr_ecdsa_names_no_curve_so_it_is_a_parse_error():
    with pytest.raises(ParseError, match=r"'\+F4:'.*without -mr") as err:
        parse("openssl", sample("openssl/speed_multi2_mr_rsa2048_ecdsap256_ed25519.stdout.txt"))
    assert err.value.line == 10


def test_openssl_mr_values_not_matching_the_sizes_is_a_parse_error():
    with pytest.raises(ParseError, match="2 values for 3 block sizes") as err:
        parse("openssl", "+H:16:64:256\n+F:25:AES-128-GCM:1.00:2.00\n")
    assert err.value.line == 2
    with pytest.raises(ParseError, match=r"before any '\+H:'"):
        parse("openssl", "+F:25:AES-128-GCM:1.00:2.00\n")


def test_iperf3_udp_json_jitter_and_loss_besides_throughput():
    m = values(parse("iperf3", sample("iperf3/udp_loopback_4G_2s.json")))
    assert m["iperf3-sent"] == (3998.16, "Mbit/s")        # 3998161447.33 bits/s
    assert m["iperf3-received"] == (3052.73, "Mbit/s")    # 3052730596.51 bits/s
    assert m["iperf3-udp-jitter"] == (0.005294702042326098, "ms")
    assert m["iperf3-udp-lost-datagrams"] == (7205, "")
    assert m["iperf3-udp-datagrams"] == (30505, "")
    assert m["iperf3-udp-lost"] == (23.62, "%")           # lost_percent 23.619...
    assert "iperf3-retransmits" not in m


def test_iperf3_udp_text_reads_the_receiver_line():
    m = values(parse("iperf3", sample("iperf3/udp_loopback_4G_2s.txt")))
    assert m["iperf3-sent"] == (4000.0, "Mbit/s")         # 4.00 Gbits/sec
    assert m["iperf3-received"] == (3070.0, "Mbit/s")     # 3.07 Gbits/sec
    assert m["iperf3-udp-jitter"] == (0.004, "ms")
    assert m["iperf3-udp-lost-datagrams"] == (7112, "")
    assert m["iperf3-udp-datagrams"] == (30507, "")
    assert m["iperf3-udp-lost"] == (23.31, "%")           # 7112/30507, printed rounded as (23%)


def test_iperf3_tcp_text_gives_the_json_names():
    m = values(parse("iperf3", sample("iperf3/tcp_loopback_2s.txt")))
    assert m == {"iperf3-sent": (31800.0, "Mbit/s"), "iperf3-retransmits": (34, ""),
                 "iperf3-received": (31800.0, "Mbit/s")}


def test_iperf3_text_error_and_json_without_udp_fields_are_parse_errors():
    with pytest.raises(ParseError, match="Connection refused") as err:
        parse("iperf3", "iperf3: error - unable to connect to server: Connection refused\n")
    assert err.value.line == 1
    with pytest.raises(ParseError, match="lacks 'packets'"):
        parse("iperf3", '{"end": {"sum": {"bits_per_second": 1e6, "jitter_ms": 0.1, '
                        '"lost_packets": 0}}}')
    with pytest.raises(ParseError, match="another shape"):
        parse("iperf3", '{"end": {"sum": {"bits_per_second": 1e6, "jitter_ms": "n/a", '
                        '"lost_packets": 0, "packets": 10}}}')


def test_stress_ng_bogo_ops_count_beside_its_rates():
    m = values(parse("stress-ng", sample("stress-ng/cpu1_hash1_metrics-brief_3s.txt")))
    assert m == {"stress-ng-cpu-bogo-ops": (3522, "bogo ops"),
                 "stress-ng-cpu": (1173.59, "bogo ops/s"), "stress-ng-cpu-cpu": (2020.15, "bogo ops/s"),
                 "stress-ng-hash-bogo-ops": (219987, "bogo ops"),
                 "stress-ng-hash": (73326.07, "bogo ops/s"),
                 "stress-ng-hash-cpu": (119251.08, "bogo ops/s")}


def test_7zip_tot_line_usage_ru_and_rating():
    m = values(parse("7zip", sample("7zip/b_1_mmt1_md18.txt")))
    assert m["7zip-total-usage"] == (98, "%")
    assert m["7zip-total-ru"] == (7553, "MIPS")
    assert m["7zip-total-rating"] == (7428, "MIPS")
    assert m["7zip-compress-rating"] == (10489, "MIPS")
    assert m["7zip-decompress-rating"] == (4368, "MIPS")


def test_7zip_summary_row_of_another_shape_is_a_parse_error():
    text = sample("7zip/b_1_mmt1_md18.txt").replace("Tot:              98   7553   7428",
                                                    "Tot:              98   7553")
    with pytest.raises(ParseError, match="summary row of another shape") as err:
        parse("7zip", text)
    assert err.value.line == 24
