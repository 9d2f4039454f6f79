"""Reports in the guides' own table shapes, so a report and a guide line up metric by metric."""

from __future__ import annotations

from benchfarm.core.guide import read_guide
from benchfarm.core.stats import seed_format
from benchfarm.report.tables import markdown, rst


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
    guide = read_guide(rst(DOC))
    assert guide.problems == []
    assert set(guide.baseline("vb-x86-0")) == {f"{s['name']} ({s['unit']})" for s in DOC["series"]}
