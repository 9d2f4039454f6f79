"""The pure renderers fed a tenant's worst figures: axes (report.svg), the report's and the release
guide's tables (Markdown, RST csv-table, HTML) and the CI outputs. What a board prints is data: a
renderer takes inf, nan, ±1e308, subnormals and a one-ulp spread, and text with quotes, pipes and
markup, in time linear in what it is given."""

from __future__ import annotations

import json
import math
import re
import time
import xml.etree.ElementTree as ET

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from benchfarm.core.guides.guide import csv_tables
from benchfarm.core.statistics.gate import Decision, Exit
from benchfarm.report import html, svg
from benchfarm.report.ci import Outcome, Step, junit, kcidb, outcome, summary
from benchfarm.report.release import Column, release_guide, release_html, release_md, release_rst
from benchfarm.report.tables import markdown, rst
from benchfarm.web.charts import history_svg

EXTREMES = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, 1e308, -1e308,
            1.7976931348623157e308, 5e-324, -5e-324, 2.2250738585072014e-308,
            10000000000000000.0, 10000000000000002.0, 2.0 ** 53, 1e-320]


def assert_axis(ticks: list[float], lo: float, hi: float) -> None:
    """Finite, strictly increasing, bounded in number, spanning a finite positive width, and
    reaching the (clamped) ends."""
    assert 2 <= len(ticks) <= 5 + 4, ticks
    assert all(math.isfinite(t) for t in ticks), ticks
    assert all(a < b for a, b in zip(ticks, ticks[1:], strict=False)), ticks
    assert 0 < ticks[-1] - ticks[0] < math.inf, ticks
    clamp = [0.0 if math.isnan(v) else min(max(v, -svg.LIMIT), svg.LIMIT) for v in (lo, hi)]
    assert ticks[0] <= min(clamp) and ticks[-1] >= max(clamp), (ticks, lo, hi)


def test_a_one_ulp_spread_ends_the_axis_loop():
    """The dashboard hung on two runs printing Time: 10000000000000000 and ...02: the step was
    below the values' float spacing and `t += step` stood still."""
    start = time.process_time()
    ticks = svg.nice_ticks(10000000000000000.0, 10000000000000002.0)
    assert time.process_time() - start < 0.1
    assert_axis(ticks, 10000000000000000.0, 10000000000000002.0)


@pytest.mark.parametrize("lo", EXTREMES)
@pytest.mark.parametrize("hi", EXTREMES)
def test_every_pair_of_extremes_gives_a_bounded_axis(lo, hi):
    assert_axis(svg.nice_ticks(lo, hi), lo, hi)
    assert all(len(svg.fmt(t)) < 40 for t in svg.nice_ticks(lo, hi))


def test_round_values_stay_round():
    assert svg.nice_ticks(9.0, 14.0) == [9.0, 10.0, 11.0, 12.0, 13.0, 14.0]
    assert svg.nice_ticks(0.1, 0.3) == [0.1, 0.15, 0.2, 0.25, 0.3]
    assert svg.fmt(12345.0) == "12,345" and svg.fmt(math.inf) == "inf" and svg.fmt(1e300) == "1e+300"


def test_a_boot_timeline_of_extreme_times_is_drawn():
    for ends in ([math.inf, math.nan], [1e308, -1e308], [5e-324, 1e-323],
                 [10000000000000000.0, 10000000000000002.0]):
        plot = html.boot_plot({"bootEvents": [{"kernel": ends[0], "prompt": ends[1]}]})
        assert plot and plot.startswith("<svg") and plot.count("<line") <= 9


def test_a_histogram_of_a_million_buckets_is_one_bounded_drawing():
    """A bar per bucket took matplotlib 30 s for 20,000 buckets; cyclictest's go to 999999 us."""
    series = [{"name": f"cyclictest-hist-{us}us", "values": [float(us % 7 + 1)]}
              for us in range(0, 1_000_000, 50)]
    series += [{"name": "cyclictest-hist-3us", "values": [v]}
               for v in (math.inf, math.nan, 1e308, 5e-324, -1.0)]
    start = time.process_time()
    assert html.cyclictest_plot({"series": series})
    assert time.process_time() - start < 20


HOSTILE = 'fio "job" | <script>alert(1)</script> [x](http://e) \\| a\nb\r\x1b[0m'


def _series(step, name, unit, values):
    return {"step": step, "name": name, "unit": unit, "higherIsBetter": True, "values": values,
            "display": f"{sum(values) / len(values):.2f}"}


def _hostile_doc():
    return {"run": {"board": "b-1", "namespace": "t", "name": "r", "uname": HOSTILE},
            "series": [_series(HOSTILE, HOSTILE, "MB/s", [1.0, 2.0]),
                       _series("plain", "plain-metric", "s", [3.0])],
            "records": [{"step": "plain", "suite": "shell", "iteration": 1, "error": HOSTILE}]}


def _cells(row: str) -> list[str]:
    """A Markdown table row's cells, as GitHub splits them: at each `|` not escaped."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]


def test_markdown_tables_hold_tenant_text_in_its_cell():
    text = markdown(_hostile_doc())
    assert "<script>" not in text and "&lt;script&gt;" in text and "[x](" not in text
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert rows and all(len(_cells(r)) == len(_cells(rows[0])) or len(_cells(r)) in (2, 3)
                        for r in rows)
    failure = next(r for r in rows if r.startswith("| plain | 1 |"))
    assert len(_cells(failure)) == 3, failure            # step, iteration, the whole error
    assert not any(line.startswith(("b\r", "b ", "\x1b")) for line in text.splitlines())


def test_rst_cells_round_trip_through_the_guide_reader_and_stay_in_their_directive():
    text = rst(_hostile_doc())
    assert not any(line.startswith(("b ", "b\r")) for line in text.splitlines()), text
    (table, *_) = [t for t in csv_tables(text) if any("job" in c for r in t.rows for c in r)]
    name = HOSTILE.replace("\n", " ").replace("\r", " ").replace("\x1b", " ")
    assert table.rows[0][0] == f"{name} (MB/s)"


def test_release_guide_tables_escape_each_format():
    guide = release_guide(HOSTILE, [Column("b-1", _hostile_doc()),
                                    Column("b-2", None, missing=HOSTILE)])
    md, rst_text, page = release_md(guide), release_rst(guide), release_html(guide)
    assert "<script>" not in md and "<script>" not in page
    assert all(not line.startswith(("b\r", "b ")) for line in md.splitlines() + rst_text.splitlines())
    assert '""job""' in rst_text


def test_junit_holds_no_character_xml_cannot():
    o = Outcome("t", "r", "u", "p", "qemu", "b-1", Decision(Exit.run, HOSTILE + "\x00\ud800"),
                steps=(Step("s", "fio", 1, 1.0, (HOSTILE + "\x00",)),))
    ET.fromstring(junit([o]))       # parses: no control character or lone surrogate in it
    json.loads(json.dumps(kcidb([o]), allow_nan=False))
    json.dumps(summary(o), allow_nan=False)


# -- property-based: any figures, any text ------------------------------------------------------

RENDER = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
RENDER_SECONDS = 5.0    # one document of up to 300 series and 64 KiB strings: ~0.1 s measured
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(EXTREMES))
TEXT = st.one_of(st.text(max_size=40), st.sampled_from([HOSTILE, "", '"', "|", "\\", "\n"]),
                 st.integers(1, 65536).map(lambda n: "|<\"\n9"[n % 5] * n))
# names the report's shapes take apart (report.shapes), with tenant text in their parts
SHAPED = st.sampled_from([
    "openssl-{0}-{1}B", "cyclictest-t{1}-max", "fio-{0}-{1}k-read-throughput",
    "dd-{0}-{1}-write-cpu-load", "netperf-{0}-{1}-throughput", "ne10-{0}-{1}-forward-neon",
    "dmatest-{0}-{1}-nc-latency", "critical-memory-access-latency-{0}-r5f", "rail-{0}-{1}",
    "rail-total-{0}", "iperf3-received", "cyclictest-hist-{1}us", "lat_mem_rd-stride64-sz{1}k"])
DIGITS = st.sampled_from(["1", "64", "9" * 20, "1" * 5000, "0"])
NAMES = st.one_of(TEXT, st.builds(lambda tpl, part, digits: tpl.format(part, digits),
                                  SHAPED, TEXT, DIGITS))


@st.composite
def documents(draw: st.DrawFn) -> dict[str, object]:
    """A metrics document (core.statistics.results.metrics_document's shape) with any figures and text."""
    series = [{"step": draw(st.sampled_from(["a", "b"]) | TEXT), "name": draw(NAMES),
               "unit": draw(st.sampled_from(["KB/s", "MB/s", "us", "%", "ns", "mW", "x"]) | TEXT),
               "higherIsBetter": draw(st.booleans()),
               "values": draw(st.lists(FLOATS, min_size=1, max_size=4)), "display": draw(TEXT)}
              for _ in range(draw(st.integers(0, 300) if draw(st.booleans()) else st.integers(0, 5)))]
    boots = draw(st.lists(st.fixed_dictionaries({"kernel": FLOATS, "prompt": FLOATS}), max_size=3))
    return {"run": {"board": draw(TEXT), "namespace": "t", "name": draw(TEXT), "uname": draw(TEXT),
                    "plan": draw(TEXT)},
            "series": series, "bootEvents": boots,
            "bootSummary": {draw(TEXT): {"display": draw(TEXT)} for _ in range(len(boots))},
            "records": [{"step": s["step"], "suite": "shell", "iteration": 1, "error": draw(TEXT)}
                        for s in series[:2]]}


def timed(render, *args):
    start = time.process_time()
    out = render(*args)
    assert time.process_time() - start < RENDER_SECONDS, render
    return out


@RENDER
@given(lo=FLOATS, hi=FLOATS, count=st.integers(-5, 10_000))
def test_any_two_floats_give_a_bounded_axis(lo, hi, count):
    ticks = timed(svg.nice_ticks, lo, hi, count)
    assert 2 <= len(ticks) <= min(max(count, 1), svg.MAX_COUNT) + 4
    assert all(math.isfinite(t) for t in ticks)
    assert all(a < b for a, b in zip(ticks, ticks[1:], strict=False))
    assert all(len(svg.fmt(t)) < 40 for t in ticks) and len(svg.fmt(lo)) < 40


@RENDER
@given(doc=documents())
def test_any_document_renders_in_every_format_and_escapes_its_text(doc):
    for render in (markdown, rst):
        text = timed(render, doc)
        assert "<script>" not in text if render is markdown else True
    assert "<script>" not in timed(html.html, {**doc, "series": [
        s for s in doc["series"] if not str(s["name"]).startswith(("cyclictest-hist", "lat_mem"))]})
    plot = timed(html.boot_plot, doc)
    assert plot is None or (plot.startswith("<svg") and "nan" not in plot.split("<text")[0])
    guide = timed(release_guide, "r1", [Column("b-1", doc), Column("b-2", None, missing="x")])
    for render in (release_md, release_rst, release_html):
        timed(render, guide)
    body = {"metadata": {"namespace": "t", "name": "r", "uid": "u"},
            "spec": {"suites": [{"name": s, "suite": "shell"} for s in {x["step"] for x in
                                                                          doc["series"]}]},
            "status": {"phase": "Succeeded"}}
    o = outcome(body, doc, Decision(Exit.ok, "done"))
    ET.fromstring(timed(junit, [o]))
    json.dumps(timed(kcidb, [o]), allow_nan=False)
    json.dumps(timed(summary, o), allow_nan=False)


@RENDER
@given(points=st.lists(st.tuples(FLOATS, st.lists(FLOATS, max_size=3)), min_size=1, max_size=200))
def test_a_dashboard_history_of_any_figures_is_drawn(points):
    doc = {"series": [{"run": f"t/r{i}", "time": "2026-01-01T00:00:00Z", "mean": mean,
                       "samples": samples} for i, (mean, samples) in enumerate(points)]}
    assert timed(history_svg, doc, "us", lambda r: f"/runs/{r}").startswith("<svg")


def test_the_reports_plots_are_drawn_and_embedded():
    """html.py's pyplot helper called itself: every report with a histogram or a lat_mem_rd
    curve ended in a RecursionError."""
    series = [{"name": f"lat_mem_rd-stride64-sz{kb}k", "values": [ns]}
              for kb, ns in ((16, 1.5), (512, 9.0), (8192, 80.0), (9, math.inf))]
    series += [{"name": "cyclictest-hist-12us", "values": [3.0], "step": "rt", "unit": "samples",
                "display": "3"}]
    assert html.lat_mem_rd_plot({"series": series})
    page = html.html({"run": {"board": "b-1"}, "series": [
        {**s, "step": "rt", "unit": "samples", "display": "3"} for s in series]})
    assert page.count("data:image/png;base64,") == 2
