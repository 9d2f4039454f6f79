"""hackbench: scheduler throughput as the time to pass all messages (seconds, lower is better)."""

from __future__ import annotations

from benchfarm.errors import ParseError
from benchfarm.suites.base import Metric, Pattern, lines_of, number

SUITE = "hackbench"
_TIME = Pattern(r"^\s*Time:\s*(\S+)", "Time:")
_MODE = Pattern(r"^Running in (\w+) mode with (\d+) groups", "Running in ")


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    times = []
    mode = None
    for i, line in enumerate(lines_of(text), 1):
        if m := _TIME.match(line):
            times.append(number(m.group(1), SUITE, i))
        elif m := _MODE.match(line):
            mode = f"{m.group(1)}-g{m.group(2)}"
    if not times:
        raise ParseError(SUITE, "no 'Time:' line")
    labels = {"mode": mode} if mode else {}
    return [Metric("hackbench-time", times[-1], "s", False, labels)]
