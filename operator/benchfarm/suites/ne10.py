"""Ne10: the FFT performance tests of ARM's Ne10 library, as the "NE10 CFFT" tables of the guides.

Ne10's performance test binaries (`NE10_dsp_unit_test_performance`) print, for each FFT function,
a header and one row per FFT length, first the forward transform and then the inverse:

    ----------test_fft_c2c_1d_float32_performance start
                   FFT Length        C Time in ms     NEON Time in ms        Time Savings   Performance Ratio
    FFT size 1024
                         1024                 810                 225              72.22%              3.60:1

Each row's times are for `testCount / length` transforms (Ne10's TEST_COUNT, 10,000,000 unless the
plan's `parameters.testCount` says otherwise), so one transform takes `ms * 1000 / loops` µs: the
guides' "1024-point float CFFT execution time" (23 µs on an AM62x A53 at 1.2 GHz).

Names: `ne10-<function>-<length>-<forward|inverse>-neon` and `-c` (us per transform, lower is
better) and `-neon-speed-up` (x), where <function> is the test's (`fft-c2c-1d-float32` for
test_fft_c2c_1d_float32_performance). Rows of other functions' tests are not FFTs: left alone.
"""

from __future__ import annotations

from benchfarm.errors import ParseError
from benchfarm.suites.base import Metric, Pattern, count_parameter, integer, lines_of, number

SUITE = "ne10"
TEST_COUNT = 10_000_000
_START = Pattern(r"^-{10}\s*test_(?P<function>\w+?)_performance start\s*$", "_performance start")
_ROW = Pattern(r"^\s*(?P<length>\d+)\s+(?P<c>\d+)\s+(?P<neon>\d+)\s+-?[\d.]+%\s+[\d.]+:1\s*$", ":1")


def check(params: dict[str, str]) -> str | None:
    """What is wrong with the parameters, checked at admission too; None when they are fine."""
    count = params.get("testCount", str(TEST_COUNT))
    if count_parameter(count) is None:
        return f"testCount {count!r} is not a positive number of transforms"
    return None


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    params = params or {}
    if problem := check(params):
        raise ParseError(SUITE, problem)
    count = count_parameter(params.get("testCount", str(TEST_COUNT))) or TEST_COUNT
    function: str | None = None
    seen: set[tuple[str, int]] = set()
    out: list[Metric] = []
    for i, line in enumerate(lines_of(text), 1):
        if m := _START.match(line):
            function = m.group("function").replace("_", "-")
            continue
        m = _ROW.match(line)
        if not m or function is None or "fft" not in function:
            continue
        length = integer(m.group("length"), SUITE, i)
        direction = "inverse" if (function, length) in seen else "forward"
        seen.add((function, length))
        loops = count // length
        if loops < 1:
            raise ParseError(SUITE, f"length {length} is above testCount {count}", line=i)
        c, neon = number(m.group("c"), SUITE, i), number(m.group("neon"), SUITE, i)
        if neon <= 0:
            raise ParseError(SUITE, f"{function} {length}: NEON time 0 ms; raise testCount", line=i)
        prefix = f"ne10-{function}-{length}-{direction}"
        out += [Metric(f"{prefix}-neon", round(neon * 1000 / loops, 3), "us", False),
                Metric(f"{prefix}-c", round(c * 1000 / loops, 3), "us", False),
                Metric(f"{prefix}-neon-speed-up", round(c / neon, 2), "x")]
    if not out:
        raise ParseError(SUITE, "no FFT performance rows; run Ne10's performance test binary "
                         "(NE10_dsp_unit_test_performance)")
    return out
