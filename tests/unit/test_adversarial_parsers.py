"""Every parser the registry names, fed what a hostile or broken board prints: near-matches of
its own patterns megabytes long, extreme figures, control characters. Each parse ends within a
time budget linear in the text, with metrics of finite values or a ParseError (never another
exception), and its time grows linearly with the text. A parser added to suites/registry.py is
covered without a line here, once tests/data/samples or adversarial.SEEDS hold lines of its
output; the last tests show the checks catch a backtracking pattern.

Deterministic: hypothesis derandomized, without an example database.
"""

from __future__ import annotations

import inspect
import math
import re
import time
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from benchfarm.core.guides import cells as guide_cells, guide
from benchfarm.core.guides.guide import read_guide
from benchfarm.errors import ParseError
from benchfarm.suites import cyclictest, registry
from benchfarm.suites.base import Metric, Pattern
from tests.conftest import guide as guide_file
from tests.unit.adversarial import (
    check_linear,
    grown,
    near_matches,
    pattern_lines,
    patterns,
    run_parser,
    seed_lines,
)

SUITES = [s for s in registry.names() if s != "shell"]       # shell reads nothing
PATTERNED = [(s, i) for s in SUITES for i in range(len(patterns(s)))]
# The budget of one parse in CPU seconds: a fixed part and a part per megabyte, several times
# what the slowest parser takes on the worst text found for it (lmbench, a megabyte of bare
# number pairs, all of them matches: 2.3 s of wall time on two loaded cores; the others under
# 1 s). A backtracking pattern is past it at once: cyclictest's old histogram row took 3 s on
# one line of 16,000 spaces.
BUDGET_SECONDS, BUDGET_PER_MB = 1.0, 8.0
PATTERN_TEXT = 256 << 10     # the near-matches of one pattern grow to this many characters
PROPERTY = settings(max_examples=10, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


def budget(text: str) -> float:
    return BUDGET_SECONDS + BUDGET_PER_MB * len(text) / 1e6


def check_result(suite: str, result: object) -> None:
    if isinstance(result, ParseError):
        assert result.suite == suite and len(str(result)) < 2000, str(result)[:300]
        return
    assert isinstance(result, list) and all(isinstance(m, Metric) for m in result), result
    assert all(isinstance(m.value, (int, float)) and math.isfinite(m.value) for m in result)


@pytest.mark.parametrize("suite", SUITES)
def test_every_suite_has_lines_of_its_output_and_every_pattern_one_it_matches(suite):
    seeds = seed_lines(suite)
    assert seeds, f"{suite}: no lines of its output in tests/data/samples or adversarial.SEEDS"
    for rx in (p for p in patterns(suite) if isinstance(p, Pattern)):     # its line patterns
        assert any(rx.search(s) for s in seeds), (
            f"{suite}: no seed line matches {rx.pattern!r}; add one to adversarial.SEEDS")


@pytest.mark.parametrize("suite", SUITES)
def test_parsers_match_with_re2_only(suite):
    """Python's re backtracks; RE2 is linear whatever the pattern."""
    module = inspect.getmodule(registry.parser(suite))
    assert not re.search(r"^import re$|^from re import", inspect.getsource(module), re.M), suite
    assert all(isinstance(p, Pattern) or type(p).__module__ == "re2" for p in patterns(suite))


NEEDLED = [(s, i) for s, i in PATTERNED
           if isinstance(p := patterns(s)[i], Pattern) and p.needles]


@pytest.mark.parametrize(("suite", "index"), NEEDLED)
def test_a_patterns_needles_are_in_everything_it_matches(suite, index):
    """A line without any of a Pattern's literals is not handed to RE2: so every match must
    hold one, or the parser would miss lines it read before."""
    rx = patterns(suite)[index]

    def holds(text: str) -> None:
        if rx.regex.search(text):
            assert any(n in text for n in rx.needles), (rx.pattern, rx.needles, text)

    # lines_of leaves tabs (RE2's \s matches them) and makes every other space a space
    for line in seed_lines(suite):
        holds(line)
        holds(line.replace(" ", "\t"))
    PROPERTY(given(text=st.from_regex(rx.pattern))(holds))()


@pytest.mark.parametrize(("suite", "index"), PATTERNED)
def test_each_pattern_is_linear_on_its_near_matches(suite, index):
    rx = patterns(suite)[index]
    regex = rx.regex if isinstance(rx, Pattern) else rx        # the pattern, not its needle
    check_linear(lambda lines: [regex.search(line) for line in lines],
                 pattern_lines(rx, suite), f"{suite} {rx.pattern!r}", largest=PATTERN_TEXT)


@pytest.mark.parametrize("suite", SUITES)
def test_each_parser_is_linear_and_within_budget_on_megabytes_of_near_matches(suite):
    growth = check_linear(lambda text: run_parser(suite, text), lambda n: near_matches(suite, n),
                          suite)
    assert growth.seconds_4n < BUDGET_SECONDS + BUDGET_PER_MB * growth.size_4n / 1e6, growth


EXTREME_NUMBERS = ["inf", "-inf", "nan", "-nan", "NaN", "1e308", "-1e308", "1e999", "5e-324",
                   "1e-320", "0", "-0", "9" * 400, "1" * 5000, "1.7976931348623157e308",
                   "10000000000000000", "10000000000000002", "4294967296", "0.0000", "."]
NOISE = ["\x00", "\x1b[2K", "\x1b[0;31m", "\r", "\u00a0", "\u2028", "\ufeff", "\t", "\v", "é",
         "\"", "|", "<script>", "{", "}", "[", "]", ":", "=", ",", "%", "--", "+H:", "+F:"]


def mutated(draw, line: str, kind: str, grow_else_cut: bool = False) -> str:
    """`line` made adversarial one way: grown to a near-match of a parser's pattern, its numbers
    made extreme, noise put inside it, cut short, or as it is. A line that cannot grow is cut
    when `grow_else_cut`, else kept."""
    if kind == "grow":
        if variants := grown(line, draw(st.sampled_from([256, 4096, 65536]))):
            return draw(st.sampled_from(variants))
        kind = "cut" if grow_else_cut else "as is"
    if kind == "numbers":
        return re.sub(r"\d+(?:\.\d+)?", draw(st.sampled_from(EXTREME_NUMBERS)), line)
    if kind == "noise":
        at = draw(st.integers(0, len(line)))
        return line[:at] + draw(st.sampled_from(NOISE)) * draw(st.integers(1, 2000)) + line[at:]
    if kind == "cut":
        return line[:draw(st.integers(0, len(line)))]
    return line


@st.composite
def hostile_text(draw: st.DrawFn, suite: str) -> str:
    """Lines made from the parser's seeds and from strings its patterns match, each maybe with
    a run grown long, its numbers made extreme, noise inserted or its end cut; repeated up to
    about 256 KiB."""
    seeds, rxs = seed_lines(suite), patterns(suite)
    lines = []
    for _ in range(draw(st.integers(1, 6))):
        if rxs and draw(st.booleans()):
            rx = draw(st.sampled_from(rxs))
            line = draw(st.from_regex(rx.pattern, fullmatch=True))
        else:
            line = draw(st.sampled_from(seeds))
        lines.append(mutated(draw, line, draw(st.sampled_from(
            ["grow", "numbers", "noise", "cut", "as is"]))))
    block = "\n".join(lines) + "\n"
    return block * draw(st.integers(1, max(1, (256 << 10) // len(block))))


@pytest.mark.parametrize("suite", SUITES)
def test_hostile_output_gives_metrics_or_a_parse_error_within_budget(suite):
    @PROPERTY
    @given(text=hostile_text(suite))
    def case(text: str) -> None:
        start = time.process_time()
        result = run_parser(suite, text)
        elapsed = time.process_time() - start
        check_result(suite, result)
        assert elapsed < budget(text), f"{suite}: {elapsed:.2f} s on {len(text)} characters"
    case()


# -- the checks catch what they are for ---------------------------------------------------------

OLD_HIST_ROW = re.compile(r"^(\d{6})\s+([\d\s]+)$")   # cyclictest's row before RE2: quadratic


def test_the_pattern_check_fails_a_backtracking_pattern():
    with pytest.raises(AssertionError, match="not linearly"):
        check_linear(lambda lines: [OLD_HIST_ROW.search(line) for line in lines],
                     pattern_lines(OLD_HIST_ROW, "cyclictest"), "old histogram row",
                     largest=PATTERN_TEXT)


def test_a_deliberately_quadratic_pattern_added_to_a_parser_makes_its_tests_fail(monkeypatch):
    """cyclictest with its old histogram row, a Python re pattern: the registry's parser fails
    the structural, the linearity and the budget checks above, each through its own helper."""
    monkeypatch.setattr(cyclictest, "_HIST_ROW", OLD_HIST_ROW)
    with pytest.raises(AssertionError):
        test_parsers_match_with_re2_only("cyclictest")
    with pytest.raises(AssertionError, match="not linearly"):
        test_each_parser_is_linear_and_within_budget_on_megabytes_of_near_matches("cyclictest")


# -- the guide reader: a vendor's file, or a tenant's, read cell by cell -------------------------

GUIDE_MODULES = [guide, guide_cells]
# a line of each kind the reader looks at, as TI's guides write them, and what is around it
TABLE = ".. csv-table:: {}\n"
GUIDE_PIECES = {
    "value cell": (TABLE.format("LMBench") + '    :header: "Benchmarks","am62xx_sk-fs: perf"\n\n',
                   '    "bw_mem-bcopy-1mb (MB/s)","4929.85 (min 1941.75, max 7917.94)"', ""),
    "header cell": (TABLE.format("Ethernet"), '    :header: "Command Used","am62xx_sk-fs: '
                    'THROUGHPUT (Mbits/sec)","am62xx_sk-fs: CPU Load % (LOCAL_CPU_UTIL)"',
                    '\n    "iperf3 -c x","900","45"\n'),
    "buffer size": (TABLE.format("EMMC EXT4 FIO 1G") + '    :header: "Buffer size (bytes)",'
                    '"am62xx_sk-fs: Write EXT4 Throughput (Mbytes/sec)"\n\n',
                    '    "102400 bytes","34 %"', ""),
    "caption": ("", "Table: **Dhrystone** (in DMIPS)", TABLE.format("") + '    :header: "a","b"'
                '\n\n    "x","1"\n'),
    "section": ("Storage Benchmarks\n", "==================", TABLE.format("") +
                '    :header: "a","b"\n\n    "x","1"\n'),
}
GUIDE_TEXT = guide_file("ti_am62ax_linux_performance_guide.rst")


def guide_near_matches(piece: str) -> Callable[[int], str]:
    """The piece's line with each of its runs grown to n characters (with and without a stray
    character after it, or cut after it), each in its own place: a row in its csv-table, a
    header after its directive, a caption or underline after a title line."""
    before, line, after = GUIDE_PIECES[piece]
    return lambda n: "".join(f"{before}{g}\n{after}\n" for g in grown(line, n))


def test_the_guide_reader_matches_with_re2_only():
    for module in GUIDE_MODULES:
        assert not re.search(r"^import re$|^from re import", inspect.getsource(module), re.M)
        compiled = [v for v in vars(module).values() if hasattr(v, "pattern")
                    and hasattr(v, "search")]
        assert compiled and all(type(p).__module__ == "re2" for p in compiled), module


@pytest.mark.parametrize("piece", GUIDE_PIECES)
def test_the_guide_reader_is_linear_on_near_matches(piece):
    text_of = guide_near_matches(piece)
    assert read_guide(text_of(8)).tables, piece
    growth = check_linear(read_guide, text_of, f"read_guide ({piece})", largest=PATTERN_TEXT)
    assert growth.seconds_4n < budget("x" * growth.size_4n), growth


@st.composite
def hostile_guide(draw: st.DrawFn) -> str:
    """A real guide's lines, some grown long, their numbers made extreme, noise inserted or
    their end cut; repeated up to about 256 KiB."""
    lines = GUIDE_TEXT.splitlines()
    start = draw(st.integers(0, len(lines) - 40))
    chosen = lines[start:start + 40]
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(chosen) - 1))
        chosen[at] = mutated(draw, chosen[at], draw(st.sampled_from(
            ["grow", "numbers", "noise", "cut"])), grow_else_cut=True)
    block = "\n".join(chosen) + "\n"
    return block * draw(st.integers(1, max(1, (256 << 10) // len(block))))


def test_a_hostile_guide_reads_within_budget_to_finite_values_and_bounded_problems():
    @PROPERTY
    @given(text=hostile_guide())
    def case(text: str) -> None:
        start = time.process_time()
        read = read_guide(text)
        elapsed = time.process_time() - start
        assert elapsed < budget(text), f"read_guide: {elapsed:.2f} s on {len(text)} characters"
        values = [r.value for t in read.tables for r in t.rows]
        assert all(math.isfinite(x) for v in values for x in (v.mean, v.min, v.max))
        assert all(len(p) < 2000 for p in read.problems), max(read.problems, key=len)[:300]
    case()


def test_a_quadratic_pattern_in_the_guide_reader_makes_its_tests_fail(monkeypatch):
    """guide_cells' header pattern as it was in Python's re (two runs of \\w over the same
    characters: quadratic on a header cell of digits without its colon)."""
    monkeypatch.setattr(guide_cells, "_BOARD",
                        re.compile(r"^\s*([A-Za-z0-9][\w.-]*[\d_-][\w.-]*)\s*:\s*(.*)$"))
    with pytest.raises(AssertionError):
        test_the_guide_reader_matches_with_re2_only()
    with pytest.raises(AssertionError, match="not linearly"):
        test_the_guide_reader_is_linear_on_near_matches("header cell")
