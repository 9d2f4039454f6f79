"""What the operator's parts say to each other about launching sessions: a launch request and
the launcher interface. Below every other module of `kube` (the import contract in pyproject.toml):
it imports nothing of `kube`, so `launchers` (which picks a kind) and `jobs` (one kind) can both
speak it without importing each other both ways.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from benchfarm.api import places
from benchfarm.api.outcomes import SessionKind
from benchfarm.kubeapi.client import API_FAILURES


@dataclass(frozen=True)
class Launch:
    """One session attempt (resume 0) or resume of a run: what any launcher needs to start it.
    A board's health check (`kind` health_check, `health_check`) is launched the same way."""
    namespace: str
    name: str
    uid: str
    attempt: int
    resume: int
    deadline_s: float = 3600.0          # what is left of the run's timeout
    reads: tuple[str, ...] = ()         # other runs of its namespace it reads (its baseline)
    board: str = ""                     # the board assigned (the session trusts no status for it)
    kind: SessionKind = SessionKind.run
    place: str = ""                     # its place as the operator knows it (HandedPlace, JSON)

    @classmethod
    def health_check(cls, board: str, board_uid: str, check: int, namespace: str,
                     deadline_s: float) -> Launch:
        """Check number `check` of a quarantined board; its Lease lives in `namespace` (the
        operator's: a Board has none)."""
        return cls(namespace, board, board_uid, check, 0, deadline_s=deadline_s, board=board,
                   kind=SessionKind.health_check)

    @classmethod
    def lease_end(cls, namespace: str, name: str, uid: str, board: str) -> Launch:
        """The end of a BoardLease: its board powered off and released, under its identity."""
        return cls(namespace, name, uid, 1, 0, deadline_s=120.0, board=board,
                   kind=SessionKind.lease_end)

    def argv(self) -> list[str]:
        """`benchfarm session <argv>`: what the session is told to do."""
        if self.kind == SessionKind.health_check:
            return [self.kind.value, self.board, str(self.attempt)]
        return [self.kind.value, f"{self.namespace}/{self.name}"]

    def what(self) -> str:
        """For logs and file names."""
        if self.kind == SessionKind.health_check:
            return f"health check {self.attempt} of {self.board}"
        if self.kind == SessionKind.lease_end:
            return f"the end of lease {self.namespace}/{self.name} on {self.board}"
        return f"{self.namespace}/{self.name} (attempt {self.attempt}, run {self.resume})"

    def env(self) -> dict[str, str]:
        """What identifies the run (or the board) to its session, beside its arguments, and the
        board's place, so that a run's session need not read the whole lab to learn it."""
        if self.kind == SessionKind.health_check:
            return {"BENCHFARM_BOARD_UID": self.uid, "BENCHFARM_HEALTH_NAMESPACE": self.namespace}
        if self.kind == SessionKind.lease_end:
            return {"BENCHFARM_LEASE_UID": self.uid}
        return {"BENCHFARM_RUN_UID": self.uid, "BENCHFARM_RUN_BOARD": self.board,
                **({places.ENV: self.place} if self.place else {})}


# What starting a session may raise that is no bug: a process that cannot be started (OSError),
# or the API's failures when it is a Job (`kubeapi.client.API_FAILURES`).
LAUNCH_FAILURES: tuple[type[Exception], ...] = (*API_FAILURES, OSError)


class Launcher(Protocol):
    def launch(self, req: Launch) -> str:
        """Start a runner for the run; returns a handle for logs and events. Raises one of
        `LAUNCH_FAILURES` when it cannot."""

    def reap(self) -> None:
        """Collect finished runners (no zombies); called from the operator's loop."""

    def end(self, req: Launch) -> str:
        """End every session of `req`'s run, whatever it is doing (the operator gave up on it:
        its Lease stopped), before another is launched: a session whose process still runs
        (stalled, or past its Lease) must never touch the board beside its successor. Returns
        what was ended, for the log and the run's events; raises one of `LAUNCH_FAILURES`."""
