"""A step's parse in a child process with a CPU and memory budget, so board output cannot stall
its session.

A parser reads what a tenant's board printed. One that backtracks on it (a quadratic pattern on
`000000` and 16,000 spaces) holds the GIL of whatever process runs it: in the session itself its
Lease went unrenewed, the operator took it for dead and resumed the run beside it, four times, and
SIGTERM did not stop it. So the session never parses itself: each parse runs in a child forked
from a forkserver (a process of one thread that has imported the parsers once: forking the
session, which has threads, could copy a lock one of them holds), with RLIMIT_CPU and RLIMIT_AS
set before it starts. The session waits on a pipe, with the GIL free for its Lease's renewals
and its run's watch, and stops the wait (killing the child) when it is fenced or cancelled, or
when a wall-clock bound far beyond the CPU budget passes (a child the host starves of CPU).

Past the budget the run fails with ParseOverBudget: the board's output is to blame, not the board.
What comes back is bounded too: at most `limit + 1` metrics (the run's metric budget, checked by
`core.budgets` in the session) and the count the parse yielded.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import resource
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from ..api.outcomes import RunFailure
from ..errors import RunError, SuiteFailure
from ..lab.session import Cancelled
from ..suites import registry
from ..suites.base import Metric

log = logging.getLogger("benchfarm.session")

Parse = Callable[[str, str, dict[str, str] | None], list[Metric]]

WALL_FACTOR = 4.0        # the wall-clock bound: this many times the CPU budget, plus WALL_SLACK
WALL_SLACK = 30.0        # seconds: a forkserver's first start, a host busy with other sessions
POLL_SECONDS = 0.5       # how often the wait looks at `stopped`
# what the forkserver imports once, so that each parse's child has it: this module (`_child`) and
# the parsers, and the session's main module (a child of a forkserver runs it as `__mp_main__`)
_PRELOAD = ["benchfarm.session.parsing", "benchfarm.cli"]


def _context() -> Any:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    return ctx


def start_forkserver() -> None:
    """Start the forkserver ahead of the first parse (it imports the parsers: a second or so)."""
    from multiprocessing import forkserver
    _context()
    forkserver.ensure_running()


def _child(conn: Connection, parse: Parse, suite: str, text: str, params: dict[str, str],
           cpu_seconds: float, memory_mib: int, limit: int) -> None:
    """In the child: the limits first, then the parse; one message back."""
    cpu = max(1, math.ceil(cpu_seconds))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))    # SIGXCPU, then SIGKILL
    memory = memory_mib * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    try:
        metrics = parse(suite, text, params)
        conn.send(("ok", metrics[:limit + 1], len(metrics)))
    except MemoryError:
        conn.send(("memory", memory_mib))
    except SuiteFailure as exc:     # a ParseError: the suite's output is not what it should be
        conn.send(("suite", exc.message, exc.reason))
    except RunError as exc:         # an unknown suite
        conn.send(("run", exc.message, exc.reason))
    except Exception as exc:        # a parser's bug: the session reports an internal error
        log.exception("the %s parser failed", suite)     # its traceback, in the session's log
        conn.send(("bug", f"{type(exc).__name__}: {str(exc)[:300]}"))
    finally:
        conn.close()


class BudgetedParse:
    """`registry.parse` with a budget: call it as the parser of a step."""

    def __init__(self, cpu_seconds: float, memory_mib: int, *,
                 stopped: Callable[[], bool] = lambda: False,
                 parse: Parse = registry.parse) -> None:
        """`stopped`: the session was fenced or cancelled (the parse is abandoned, the child
        killed, and `Cancelled` raised: the runner
        then says why it stopped); `parse`: the parser to run (a test's own)."""
        self.cpu_seconds, self.memory_mib = cpu_seconds, memory_mib
        self.stopped, self.parse = stopped, parse
        self.wall_seconds = cpu_seconds * WALL_FACTOR + WALL_SLACK
        self.count = 0        # how many metrics the last parse yielded

    def __call__(self, suite: str, text: str, params: dict[str, str] | None = None, *,
                 limit: int = 1_000_000) -> list[Metric]:
        """The metrics of `text` (at most `limit + 1` of them: `count` says how many the parse
        yielded). Raises what the parser raises (ParseError), RunError(ParseOverBudget) past
        the budget, `Cancelled` when the session stopped meanwhile."""
        self.count = 0
        ctx = _context()
        receive, send = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_child, name=f"parse-{suite}", daemon=True, args=(
            send, self.parse, suite, text, dict(params or {}), self.cpu_seconds,
            self.memory_mib, limit))
        started = time.monotonic()
        child.start()
        send.close()
        try:
            message = self._wait(receive, child, started)
        finally:
            receive.close()
            if child.is_alive():
                child.kill()
            child.join(5.0)
        took = time.monotonic() - started
        if message is None:
            if child.exitcode in (-signal.SIGXCPU, -signal.SIGKILL):
                raise self._over(suite, f"took more than the {self.cpu_seconds:g} CPU seconds "
                                 f"a parse may take")
            raise RuntimeError(f"the {suite} parse's process ended with {child.exitcode} and "
                               f"no answer")
        kind = message[0]
        if kind == "ok":
            self.count = int(message[2])
            log.debug("%s parsed in %.2f s: %d metric(s)", suite, took, self.count)
            return list(message[1])
        if kind == "memory":
            raise self._over(suite, f"needed more than the {self.memory_mib} MiB a parse may take")
        if kind == "suite":
            raise SuiteFailure(message[1], reason=message[2])
        if kind == "run":
            raise RunError(message[1], reason=message[2])
        raise RuntimeError(f"the {suite} parser failed: {message[1]}")

    def _wait(self, receive: Connection, child: Any, started: float) -> tuple[Any, ...] | None:
        """The child's message; None when it ended without one (killed by its CPU limit)."""
        while True:
            if receive.poll(POLL_SECONDS):
                try:
                    message: tuple[Any, ...] = receive.recv()
                    return message
                except EOFError:          # it died before it could answer
                    child.join(5.0)
                    return None
            if self.stopped():
                raise Cancelled("the session stopped during a parse; the parse was abandoned")
            if time.monotonic() - started > self.wall_seconds:
                raise self._over(child.name.removeprefix("parse-"),
                                 f"ran for more than {self.wall_seconds:g} s")
            if not child.is_alive() and not receive.poll(0):
                child.join(5.0)
                return None

    @staticmethod
    def _over(suite: str, what: str) -> RunError:
        return RunError(f"parsing the output of {suite} {what}: the board's output, not the "
                        f"board, is to blame (BENCHFARM_PARSE_CPU_SECONDS, "
                        f"BENCHFARM_PARSE_MEMORY_MIB)", reason=RunFailure.parse_over_budget)
