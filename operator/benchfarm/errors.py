"""Why a run stopped, sorted by who is to blame, because each party is treated differently.

- A board fault (no boot, silent console, lost shell, failed wake) is the board's: the run is
  retried on another board and the fault counts toward the board's quarantine.
- An outage (API server, MinIO, labgrid coordinator) is the lab's services': it is waited out with
  backoff, bounded by the run's timeout, and never counts against a board.
- A busy board (someone else holds the place) is nobody's fault: the run waits for another turn.
- A run error (bad input, the run's own timeout) fails the run at once and is never retried.
- A suite failure is recorded and the run goes on.
Only `benchfarm.kube` maps these to kopf's Temporary/Permanent errors.
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
    """The lab failed us. `party` says whose fault it is: "board", "lab", "store" or "api"."""

    reason = "InfrastructureError"
    party = "lab"


class BoardFault(InfraError):
    """The board itself misbehaved: the only kind of error that counts toward quarantine."""

    reason = "BoardFault"
    party = "board"


class DeployedBootFailed(BoardFault):
    """A boot failed after the bootloader had loaded the run's own software: what was seen, not
    yet whose fault it is (the session decides: `session.blame`)."""

    reason = "BootFailed"


class Outage(InfraError):
    """A service the lab depends on is unreachable; wait it out, blame no board."""

    reason = "Outage"

    def __init__(self, message: str, *, party: str, reason: str | None = None) -> None:
        super().__init__(message, reason=reason)
        self.party = party


class BoardBusy(InfraError):
    """The place is held by someone else (a person's lock or reservation); wait, never take it."""

    reason = "BoardBusy"


class RunError(BenchfarmError):
    """The request itself is wrong (or ran out of its own time): fail the run, never retry."""

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
