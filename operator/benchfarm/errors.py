"""Why a run stopped, sorted by who is to blame, because each party is treated differently.

- A board fault (no boot, silent console, lost shell, failed wake) is the board's: the run is
  retried on another board and the fault counts toward the board's quarantine.
- An outage (API server, MinIO, labgrid coordinator) is the lab's services': it is waited out with
  backoff, bounded by the run's timeout, and never counts against a board.
- A busy board (someone else holds the place) is nobody's fault: the run waits for another turn.
- A run error (bad input, the run's own timeout) fails the run at once and is never retried.
- A suite failure is recorded and the run goes on.
Only `benchfarm.operator` maps these to kopf's Temporary/Permanent errors.
"""

from __future__ import annotations

from enum import StrEnum


class Party(StrEnum):
    """Whose fault an infrastructure error is (`InfraError.party`): a board's, or a service's
    of the lab."""

    board = "board"
    lab = "lab"                  # the lab's own wiring: a PDU, an exporter, a deployment step
    api = "api"                  # the Kubernetes API server
    store = "store"              # the artifact store (S3, MinIO)
    database = "database"        # the results database
    coordinator = "coordinator"  # the labgrid coordinator


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
    """The lab failed us. `party` says whose fault it is (`Party`)."""

    reason = "InfrastructureError"
    party: str = Party.lab


class BoardFault(InfraError):
    """The board itself misbehaved: the only kind of error that counts toward quarantine."""

    reason = "BoardFault"
    party = Party.board


class DeployedBootFailed(BoardFault):
    """A boot failed after the bootloader had loaded the run's own software: what was seen, not
    yet whose fault it is (the session decides: `session.blame`)."""

    reason = "BootFailed"


class Outage(InfraError):
    """A service the lab depends on is unreachable; wait it out, blame no board."""

    reason = "Outage"

    def __init__(self, message: str, *, party: Party, reason: str | None = None) -> None:
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
    MAX_MESSAGE = 500   # the message quotes board output; it goes into the run's status

    def __init__(self, suite: str, message: str, *, line: int | None = None) -> None:
        where = f" (line {line})" if line is not None else ""
        if len(message) > self.MAX_MESSAGE:
            message = message[:self.MAX_MESSAGE] + "…"
        super().__init__(f"{suite}: {message}{where}")
        self.suite = suite
        self.line = line
