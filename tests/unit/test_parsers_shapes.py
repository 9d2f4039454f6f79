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
