"""What the operator's parts say to each other about launching sessions: a launch request and
the launcher interface. Below every other module of `kube` (the import contract in pyproject.toml):
it imports nothing of `kube`, so `launchers` (which picks a kind) and `jobs` (one kind) can both
speak it without importing each other both ways.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..api import places


@dataclass(frozen=True)
class Launch:
    """One session attempt (resume 0) or resume of a run: what any launcher needs to start it."""
    namespace: str
    name: str
    uid: str
    attempt: int
    resume: int
    deadline_s: float = 3600.0          # what is left of the run's timeout
    reads: tuple[str, ...] = ()         # other runs of its namespace it reads (its baseline)
    board: str = ""                     # the board assigned (the session trusts no status for it)
    place: str = ""                     # its place as the operator knows it (HandedPlace, JSON)

    def env(self) -> dict[str, str]:
        """What identifies the run to its session, beside its NAMESPACE/NAME argument, and the
        board's place, so that the session need not read the whole lab to learn it."""
        return {"BENCHFARM_RUN_UID": self.uid, "BENCHFARM_RUN_BOARD": self.board,
                **({places.ENV: self.place} if self.place else {})}


class Launcher(Protocol):
    def launch(self, req: Launch) -> str:
        """Start a runner for the run; returns a handle for logs and events."""

    def reap(self) -> None:
        """Collect finished runners (no zombies); called from the operator's loop."""
