"""Why a run stopped, in three kinds the operator treats differently.

An infrastructure error (board, lab, network) is retried elsewhere and counts against the board;
a run error (bad input) fails the run at once and is never retried; a suite failure is recorded and
the run goes on. Only `benchfarm.kube` maps these to kopf's Temporary/Permanent errors.
"""

from __future__ import annotations


class BenchfarmError(Exception):
    """Base of every error benchfarm raises on purpose."""

    reason: str = "Error"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        if reason:
            self.reason = reason

    @property
    def message(self) -> str:
        return str(self)


class InfraError(BenchfarmError):
    """The lab failed us: a board did not boot, the serial port is silent, a service is down."""

    reason = "InfrastructureError"


class BoardBusy(InfraError):
    """The place is held by someone else (a person's lock or reservation); wait, never take it."""

    reason = "BoardBusy"


class RunError(BenchfarmError):
    """The request itself is wrong: unknown suite, bad plan, policy violation. Never retried."""

    reason = "InvalidRun"


class SuiteFailure(BenchfarmError):
    """A suite ran on the board and failed (non-zero exit, timeout, output we cannot parse)."""

    reason = "SuiteFailed"


class ParseError(SuiteFailure):
    """A parser met output it cannot read; names the suite and the line so a person can look."""

    reason = "ParseError"

    def __init__(self, suite: str, message: str, *, line: int | None = None) -> None:
        where = f" (line {line})" if line is not None else ""
        super().__init__(f"{suite}: {message}{where}")
        self.suite = suite
        self.line = line
