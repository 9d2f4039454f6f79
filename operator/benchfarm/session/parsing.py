"""A step's parse in a child process with a CPU and memory budget (`benchfarm.budgeted`), so
board output cannot stall its session.

A parser reads what a tenant's board printed. One that backtracks on it (a quadratic pattern on
`000000` and 16,000 spaces) holds the GIL of whatever process runs it: in the session itself its
Lease went unrenewed, the operator took it for dead and resumed the run beside it, four times, and
SIGTERM did not stop it. So the session never parses itself: each parse runs in a budgeted child
(BENCHFARM_PARSE_CPU_SECONDS, BENCHFARM_PARSE_MEMORY_MIB) while the session goes on renewing its
Lease and watching its run; the wait stops (the child killed) when the session is fenced or
cancelled.

Past the budget the run fails with ParseOverBudget: the board's output is to blame, not the board.
What comes back is bounded too: at most `limit + 1` metrics (the run's metric budget, checked by
`core.policy.budgets` in the session) and the count the parse yielded.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from benchfarm import budgeted
from benchfarm.api.outcomes import RunFailure
from benchfarm.errors import RunError, SuiteFailure
from benchfarm.lab.session import Cancelled
from benchfarm.suites import registry
from benchfarm.suites.base import Metric

log = logging.getLogger("benchfarm.session")

Parse = Callable[[str, str, dict[str, str] | None], list[Metric]]

# what the session's forkserver imports once, so that each child has it: the parsers (this
# module), the results and reports (`session.results`: numpy, scipy, the report templates), and
# the session's main module
PRELOAD = ("benchfarm.session.parsing", "benchfarm.session.results", "benchfarm.cli")


def start_forkserver() -> None:
    """Start the session's forkserver ahead of the first parse (it imports the parsers and the
    reports: a second or so)."""
    budgeted.start(PRELOAD)


def _parse(parse: Parse, suite: str, text: str, params: dict[str, str],
           limit: int) -> tuple[Any, ...]:
    """In the child: the parse, and what it raised that the session judges, as a value."""
    try:
        metrics = parse(suite, text, params)
        return ("ok", metrics[:limit + 1], len(metrics))
    except SuiteFailure as exc:     # a ParseError: the suite's output is not what it should be
        return ("suite", exc.message, exc.reason)
    except RunError as exc:         # an unknown suite
        return ("run", exc.message, exc.reason)


class BudgetedParse:
    """`registry.parse` with a budget: call it as the parser of a step."""

    def __init__(self, cpu_seconds: float, memory_mib: int, *,
                 stopped: Callable[[], bool] = lambda: False,
                 parse: Parse = registry.parse) -> None:
        """`stopped`: the session was fenced or cancelled (the parse is abandoned, the child
        killed, and `Cancelled` raised: the runner
        then says why it stopped); `parse`: the parser to run (a test's own)."""
        self.budget = budgeted.Budget(cpu_seconds, memory_mib)
        self.stopped, self.parse = stopped, parse
        self.count = 0        # how many metrics the last parse yielded

    def __call__(self, suite: str, text: str, params: dict[str, str] | None = None, *,
                 limit: int = 1_000_000) -> list[Metric]:
        """The metrics of `text` (at most `limit + 1` of them: `count` says how many the parse
        yielded). Raises what the parser raises (ParseError), RunError(ParseOverBudget) past
        the budget, `Cancelled` when the session stopped meanwhile."""
        self.count = 0
        try:
            message = budgeted.call(_parse, self.parse, suite, text, dict(params or {}), limit,
                                    budget=self.budget, preload=PRELOAD, stopped=self.stopped,
                                    name=f"parse-{suite}")
        except budgeted.OverBudget as exc:
            raise RunError(f"parsing the output of {suite} {exc.what}: the board's output, not "
                           f"the board, is to blame (BENCHFARM_PARSE_CPU_SECONDS, "
                           f"BENCHFARM_PARSE_MEMORY_MIB)",
                           reason=RunFailure.parse_over_budget) from None
        except budgeted.Abandoned:
            raise Cancelled("the session stopped during a parse; the parse was abandoned") \
                from None
        except budgeted.Failed as exc:     # a parser's bug: the session reports an internal error
            raise RuntimeError(f"the {suite} parser failed: {exc.detail}") from None
        kind = message[0]
        if kind == "suite":
            raise SuiteFailure(message[1], reason=message[2])
        if kind == "run":
            raise RunError(message[1], reason=message[2])
        self.count = int(message[2])
        log.debug("%s parsed: %d metric(s)", suite, self.count)
        return list(message[1])
