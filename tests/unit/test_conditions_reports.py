"""What the reports and the dashboard's run page show of the conditions: per step a table of its
attempts and the invalid ones with why, "simulated" where the source is, the HTML report's fused
timeline (power, frequency, temperature on the boots' host clock) bounded whatever a run
recorded; the board's text escaped in every format, and any conditions rendered in time linear in
what was given (hypothesis)."""

from __future__ import annotations

import json
import math
import re
import time
import xml.etree.ElementTree as ET

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from benchfarm.core.guides.guide import read_guide
from benchfarm.report import timeline as tl
from benchfarm.report.conditions import EXCLUDED, SIMULATED, markdown_lines, step_tables
from benchfarm.report.html import html
from benchfarm.report.tables import markdown, rst
from benchfarm.session import results as res
from benchfarm.web import rendering, views
from benchfarm.web.access import Person
from tests.unit.conditionsdata import (
    DTYPE,
    RUN,
    SUITES,
    T0,
    THROTTLED,
    boot_checkpoint,
    conditions,
    record,
    suite_checkpoint,
)

HOSTILE = '<script>alert(1)</script> | [x](javascript:1) \\ "q" `r`_ |s| \n.. raw:: html\n\n  <b>'


def documents(*checkpoints: dict) -> res.Documents:
    got = res.Collected()
    for c in checkpoints:
        got.add(c)
    return res.build(RUN, DTYPE, SUITES, got)


def run_with_a_retake() -> res.Documents:
    return documents(boot_checkpoint(1), suite_checkpoint("cpu", 1, 101.0, T0 + 10),
                     suite_checkpoint("cpu", 2, 102.0, T0 + 20, invalid_attempts=1),
                     suite_checkpoint("cpu", 3, 103.0, T0 + 40))


def test_markdown_shows_each_attempt_the_invalid_ones_with_why_and_simulated():
    text = run_with_a_retake().files["report.md"][0].decode()
    assert "## Measured under" in text and "### cpu" in text
    assert ("| Iteration | Attempt | Valid | Frequency (MHz) | Governor | Temperature max (°C) | "
            "Busy before | Throttle events | Energy (J) | Average power (W) |") in text
    assert "| 2 | 1 | no | 600–1000 | performance | 52 | 2 % | 4 | 4 | 2 |" in text
    assert "| 2 | 2 | yes | 1000 | performance | 52 | 2 % | 0 | 4 | 2 |" in text
    assert text.count("| yes |") == 3
    assert EXCLUDED in text and SIMULATED in text
    assert f"- iteration 2, attempt 1, raw output raw/cpu-2-retake-0.out: {THROTTLED}" in text
    assert ("valid iterations: 3 of 3; frequency 1000 MHz (median 1000); governor performance; "
            "temperature 45–52 °C; busy before 2 %; energy 4 J, average power 2 W (mean of the "
            "valid iterations); per rail vdd_core 3 J / 1.5 W, vdd_ddr 1 J / 0.5 W; 1 invalid "
            "attempt(s), excluded from the statistics.") in text
    # the energy metrics are figures like any other
    assert "| sysbench-cpu-events-per-watt (events/s/W) |" in text


def test_rst_lists_the_attempts_and_a_guide_read_from_it_takes_none_for_a_metric():
    docs = run_with_a_retake()
    text = docs.files["report.rst"][0].decode()
    assert "Measured under\\: cpu\n" in text and ".. list-table::" in text
    assert "   * - 2\n     - 1\n     - no\n" in text
    guide = read_guide(text)
    assert guide.problems == []
    assert set(guide.baseline("vb-0")) == {f"{s['name']} ({s['unit']})"
                                           for s in docs.doc["series"]} | {
        f"{phase} (s)" for phase in docs.doc["bootSummary"]}


def test_the_html_report_has_the_table_and_the_fused_timeline_on_the_boots_clock():
    page = run_with_a_retake().files["report.html"][0].decode()
    assert page.count('<tr class="invalid">') == 1 and "<td>2</td>" in page
    svg = page[page.index('<svg', page.index("Measured under: power")):]
    svg = svg[:svg.index("</svg>") + 6]
    root = ET.fromstring(svg)
    ns = {"s": "http://www.w3.org/2000/svg"}
    ids = {g.get("id") for g in root.findall("s:g", ns)}
    assert ids == {"timeline-steps", "timeline-power", "timeline-frequency",
                   "timeline-temperature"}
    titles = [t.text for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert titles == ["boot 1", "cpu #2 (invalid)", "cpu #1", "cpu #2", "cpu #3"]
    ticks = [t.text for t in root.findall("s:text", ns) if t.get("text-anchor") == "middle"]
    assert ticks[0] == "0" and float(ticks[-2]) >= 42      # seconds since power-on
    # the retaken attempt's span starts 20 s after the power-on (its before snapshot)
    lane = root.find("s:g[@id='timeline-steps']", ns)
    boot, retaken = lane.findall("s:path", ns)[:2]
    x0 = float(boot.get("d").split()[1])
    x20 = float(retaken.get("d").split()[1])
    width = 720 - 64 - 16
    assert x0 == 64 and x20 == pytest.approx(64 + 20 / float(ticks[-2]) * width, abs=0.01)


def test_the_timeline_stays_bounded_for_a_run_of_many_long_steps():
    records = []
    for i in range(300):
        c = conditions(T0 + 100 * i)
        c["power"]["samples"] = [[T0 + 100 * i + k / 10, 2000.0 + k] for k in range(600)]
        c["during"] = [c["during"][0] | {"t": T0 + 100 * i + k / 10} for k in range(120)]
        records.append(record("cpu", i + 1, 1.0, c))
    start = time.process_time()
    svg = tl.timeline({"records": records, "powerOnTimes": [T0], "bootEvents": [{"prompt": 4}]})
    assert time.process_time() - start < 10
    for key in ("power", "frequency", "temperature"):
        group = svg[svg.index(f'id="timeline-{key}"'):]
        line = re.search(r'<path d="(M [^"]*)" style="fill: none', group).group(1)
        assert line.count(" L ") + line.count("M ") <= tl.MAX_POINTS
    assert svg.count("<title>") <= 2 * tl.MAX_SPANS and len(svg) < 600_000


def test_a_report_grows_linearly_with_its_attempts():
    def size(n: int) -> int:
        docs = documents(*(suite_checkpoint("cpu", i, 1.0, T0 + 50 * i, invalid_attempts=1)
                           for i in range(1, n + 1)))
        return sum(len(docs.files[f][0]) for f in ("report.md", "report.rst", "report.html"))
    small, large = size(20), size(80)
    assert large < 4.5 * small


def test_the_boards_text_is_escaped_in_every_format():
    c = conditions(T0, invalid=(HOSTILE,), governor=HOSTILE)
    c["before"]["cpufreq"]["policy0"]["governor"] = HOSTILE
    c["power"]["rails"] = {HOSTILE: {"energyJ": 1.0, "averageW": 0.5}}
    got = res.Collected()
    got.add({"kind": "suite", "record": record(HOSTILE, 1, 1.0, c, artifact=HOSTILE)})
    docs = res.build(RUN, DTYPE, SUITES, got)
    md_text = docs.files["report.md"][0].decode()
    assert "<script>" not in md_text and "\\| \\[x\\](javascript:1)" in md_text
    assert all(not line.startswith(".. raw") for line in md_text.splitlines())
    page = docs.files["report.html"][0].decode()
    assert "<script>" not in page and "&lt;script&gt;" in page and "<b>" not in page
    rst_text = docs.files["report.rst"][0].decode()
    assert all(not line.lstrip().startswith(".. raw") for line in rst_text.splitlines())
    docutils = pytest.importorskip("docutils.core")
    tree = docutils.publish_doctree(rst_text, settings_overrides={
        "report_level": 5, "halt_level": 5, "raw_enabled": True})
    assert not [n for n in tree.findall() if n.tagname in ("raw", "reference", "target",
                                                            "substitution_reference")]
    assert "<script>alert(1)</script>" in tree.astext()     # shown as the text it is


# -- the dashboard's run page ------------------------------------------------------------------

PAGE = {"person": Person("alice", frozenset({"ns"})), "row": {
    "key": "ns/r", "phase": "Succeeded", "reason": "Completed", "plan": "p", "deviceType": "vt",
    "software": ""}, "st": {"board": "vb-0"}, "events": [], "artifacts": [], "report": None,
    "spec_yaml": "{}"}


def test_the_run_page_shows_each_steps_attempts_from_its_metrics_json():
    raw = run_with_a_retake().files["metrics.json"][0]
    page = rendering.run_page(PAGE, raw)
    assert '<h2 id="measured-under">Measured under</h2>' in page
    assert page.count('<tr class="attempt">') == 3 and page.count('<tr class="attempt invalid">') == 1
    assert "raw output raw/cpu-2-retake-0.out" in page and "simulated" in page
    assert "Measured under" not in rendering.run_page(PAGE, None)


def test_the_run_page_of_an_ab_run_names_each_side_and_escapes_the_boards_text():
    got = res.Collected()
    for side in ("a", "b"):
        got.add(suite_checkpoint(HOSTILE, 1, 1.0, T0, side=side, invalid_attempts=1,
                                 reason=HOSTILE))
    docs = res.build_ab(RUN, DTYPE, SUITES, got, {"a": "v1", "b": "v<2>"})
    measured = views.measured_under(docs.files["metrics.json"][0])
    assert [side for side, _ in measured] == ["v1", "v<2>"]
    page = rendering.run_page(PAGE, docs.files["metrics.json"][0])
    assert "<script>" not in page and "v&lt;2&gt;: " in page


@pytest.mark.parametrize("raw", [b"", b"not json", b"[1, 2]", b'{"records": 7}',
                                 b'{"sides": {"a": 3}}', json.dumps(
                                     {"records": [{"conditions": {"before": 1}}]}).encode()])
def test_a_metrics_json_that_is_no_document_shows_nothing_on_the_run_page(raw):
    assert views.measured_under(raw) == [] or all(
        t.rows for _, t in views.measured_under(raw))
    assert "<h2>Events</h2>" in rendering.run_page(PAGE, raw)


# -- property-based: any conditions a board could report -----------------------------------------

RENDER = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
EXTREMES = [0.0, -0.0, 1.0, math.inf, -math.inf, math.nan, 1e308, -1e308, 5e-324, 1e16,
            1e16 + 2]
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(EXTREMES))
TEXT = st.one_of(st.text(max_size=30), st.sampled_from([HOSTILE, "", "|", "\\", "\n", ".. x::"]))
INTS = st.one_of(st.integers(-(2 ** 70), 2 ** 70), st.sampled_from([0, 10 ** 18, -1]))


def snapshots() -> st.SearchStrategy[dict]:
    return st.fixed_dictionaries({"t": FLOATS}, optional={
        "cpufreq": st.dictionaries(TEXT, st.fixed_dictionaries({}, optional={
            "curKHz": INTS, "governor": TEXT}), max_size=3),
        "thermal": st.dictionaries(TEXT, st.fixed_dictionaries({"tempC": FLOATS}), max_size=3),
        "throttle": st.dictionaries(TEXT, INTS, max_size=2), "busy": FLOATS})


GARBAGE = st.recursive(st.none() | st.booleans() | FLOATS | TEXT,
                       lambda inner: st.lists(inner, max_size=3) |
                       st.dictionaries(TEXT, inner, max_size=3), max_leaves=8)
CONDITIONS = st.one_of(st.fixed_dictionaries({}, optional={
    "before": snapshots(), "during": st.lists(snapshots(), max_size=4), "after": snapshots(),
    "power": st.fixed_dictionaries({"seconds": FLOATS, "energyJ": FLOATS, "averageW": FLOATS},
                                   optional={"samples": st.lists(st.tuples(FLOATS, FLOATS),
                                                                 max_size=20),
                                             "rails": st.dictionaries(TEXT, st.fixed_dictionaries(
                                                 {"energyJ": FLOATS, "averageW": FLOATS}),
                                                 max_size=2)}),
    "valid": st.booleans(), "invalid": st.lists(TEXT, max_size=12), "retake": INTS,
    "simulated": st.booleans()}), GARBAGE)


@RENDER
@given(attempts=st.lists(st.tuples(TEXT, st.integers(-3, 5), st.booleans(), CONDITIONS),
                         max_size=12),
       boots=st.lists(st.tuples(FLOATS, st.dictionaries(TEXT, FLOATS, max_size=3)), max_size=3))
def test_any_conditions_render_in_every_format_escaped_and_bounded(attempts, boots):
    records = [{"step": step, "iteration": it, "warmup": False, "artifact": None, "error": None,
                "metrics": [], "conditions": c} for step, it, retaken, c in attempts if not retaken]
    retaken = [{"step": step, "iteration": it, "warmup": False, "conditions": c}
               for step, it, was_retaken, c in attempts if was_retaken]
    doc = {"run": {"board": "b"}, "records": records, "retaken": retaken,
           "powerOnTimes": [t for t, _ in boots], "bootEvents": [e for _, e in boots],
           "conditions": {"x": {"simulated": True}}}
    start = time.process_time()
    tables = step_tables(doc)
    text = "\n".join(markdown_lines(doc))
    assert "<script>" not in text and "<script>" not in markdown(doc)
    assert all(not line.lstrip().startswith(".. ") for line in rst(doc).splitlines()
               if not line.lstrip().startswith(".. list-table::"))
    page = html(doc)
    assert "<script>" not in page
    svg = tl.timeline(doc)
    if svg is not None:
        drawn = [v for e in ET.fromstring(svg).iter() for k, v in e.attrib.items()
                 if k in ("d", "x", "y", "x1", "x2", "y1", "y2")]
        assert not [v for v in drawn if "nan" in v or "inf" in v]
    assert time.process_time() - start < 5
    assert sum(len(t.rows) for t in tables) <= len(attempts)
    assert len(page) < 20_000 + 3_000 * len(attempts) + 200 * sum(
        len(str(c)) for *_, c in attempts)
