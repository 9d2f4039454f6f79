"""A Board's shape: which boards a run or a lease may take (`BoardSelector`), a board's state, spec
and status as the operator writes it, and who holds it in labgrid when nobody of benchfarm does
(`held_by`). No I/O.
"""

from __future__ import annotations

from enum import Enum

from pydantic import Field

from benchfarm.api.base import LabelKey, LabelValue, Model, Name, Status


class BoardSelector(Model):
    """Which boards may run this: a device type and labels, or one board by name."""

    deviceType: Name | None = Field(None, description="Device type of the board, e.g. qemu-x86.")
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=16,
                                               description="Labels the board must carry.")
    board: Name | None = Field(None, description="One board (labgrid place) by name.")


class DirectLocks(str, Enum):  # noqa: UP042 - as BoardState
    respect = "Respect"
    report = "Report"


class BoardState(str, Enum):  # noqa: UP042 - StrEnum would change str() and format() of a member
    idle = "Idle"
    busy = "Busy"
    quarantined = "Quarantined"
    offline = "Offline"
    maintenance = "Maintenance"


# What the operator writes and the dashboard reads besides the Board's fields: a board someone
# else holds in labgrid (a person's lock, a reservation) has BoardStatus.run HELD_PREFIX + the
# holder.
HELD_PREFIX = "labgrid: "


def held_by(run: str | None) -> str | None:
    """Who holds the board in labgrid, from BoardStatus.run; None when nobody else does."""
    return run[len(HELD_PREFIX):] if run and run.startswith(HELD_PREFIX) else None


class BoardSpec(Model):
    maintenance: bool = Field(False, description="Drain: finish the current run, take no new one.")


class BoardStatus(Status):
    deviceType: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    state: BoardState | None = None
    run: str | None = None
    consecutiveInfraFailures: int = 0
    reason: str | None = None
    quarantinedAt: str | None = None
