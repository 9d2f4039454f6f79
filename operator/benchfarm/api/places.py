"""A labgrid place as benchfarm knows it: who holds it (the `host/user` identities benchfarm's
clients acquire under, and a holder's name read back), what it is (`PlaceInfo`, as
`lab.coordinator` reads it) and what the operator hands a board session about it at launch.
Pure: no labgrid, so the operator, the sessions and the command line share them without it.

The operator keeps the whole lab in view (every place and resource, from its one labgrid client).
A session needs only its own place: the operator hands it what it knows of that place (tags,
matches, the resources they match, as labgrid's coordinator lists them) in the launch environment
(`BENCHFARM_RUN_PLACE`), and the session's labgrid client starts from that instead of syncing the
whole lab (1,000 places and 2,000 resources per session launch at scale). Nothing in it is trusted
for the lock: who holds the place is always the coordinator's word (lab/coordinator.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

# Who benchfarm is to the coordinator: places show as acquired by "<host>/<user>". Each board
# session acquires under its own identity (see `run_identity`), so two sessions never share one.
DEFAULT_USER = "benchfarm"
DEFAULT_HOST = "operator"
SESSION_HOST = "benchfarm"


def run_identity(uid: str) -> tuple[str, str]:
    """(host, user) of the session of the run with this uid, as labgrid shows it: host/user."""
    return SESSION_HOST, f"run-{uid}"


def run_holder(uid: str) -> str:
    """The holder of a place the session of the run with this uid acquired, as labgrid names it."""
    return "/".join(run_identity(uid))


def lease_identity(uid: str) -> tuple[str, str]:
    """(host, user) a BoardLease holds its place under: the lease's own, not the person's (the
    person's labgrid user is allowed on the place); its end session powers off under it too."""
    return SESSION_HOST, f"lease-{uid}"


def lease_uid_of(holder: str | None) -> str | None:
    """The uid of the BoardLease behind a labgrid holder identity, if it is one."""
    prefix = f"{SESSION_HOST}/lease-"
    return holder[len(prefix):] if holder and holder.startswith(prefix) else None


def health_identity(board: str, check: int) -> tuple[str, str]:
    """(host, user) of the session of a board's health check number `check`: each check its
    own, so a check's session that lives on after it was given up holds nothing of the next."""
    return SESSION_HOST, f"health-{check}-{board}"


def health_check_of(holder: str | None) -> tuple[str, int] | None:
    """(board, check) behind a labgrid holder identity of a health check's session, if it is one."""
    prefix = f"{SESSION_HOST}/health-"
    if not holder or not holder.startswith(prefix):
        return None
    check, _, board = holder[len(prefix):].partition("-")
    return (board, int(check)) if check.isdigit() and board else None


def netcheck_identity(host: str, pid: int) -> tuple[str, str]:
    """(host, user) of `benchfarm check --boards` on a board it audits: its own, one per
    process, so the operator knows it for benchfarm's (no DirectLock) and nobody else's."""
    return SESSION_HOST, f"netcheck-{host}-{pid}"


def is_netcheck(holder: str | None) -> bool:
    """Is this labgrid holder a board-network audit (`netcheck_identity`)?"""
    return bool(holder) and str(holder).startswith(f"{SESSION_HOST}/netcheck-")


@dataclass(frozen=True)
class PlaceInfo:
    """What benchfarm needs to know of a labgrid place."""

    name: str
    tags: dict[str, str] = field(default_factory=dict)
    acquired: str | None = None
    reserved_by: str | None = None
    matches: tuple[str, ...] = ()
    comment: str = ""
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)  # cls -> params

    @property
    def free(self) -> bool:
        return self.acquired is None and self.reserved_by is None

ENV = "BENCHFARM_RUN_PLACE"


class HandedMatch(BaseModel):
    """A labgrid ResourceMatch: exporter/group/cls[/name], and the name it gives the resource."""

    model_config = ConfigDict(frozen=True)

    exporter: str
    group: str
    cls: str
    name: str | None = None
    rename: str | None = None


class HandedResource(BaseModel):
    """One resource the place matches: its path at the coordinator and its entry's data
    (`cls`, `params`, `acquired`, `avail`, as labgrid's ResourceEntry holds it)."""

    exporter: str
    group: str
    name: str
    data: dict[str, Any]


class HandedPlace(BaseModel):
    """A place as the operator saw it when it launched the session."""

    name: str
    tags: dict[str, str] = {}
    comment: str = ""
    matches: list[HandedMatch] = []
    resources: list[HandedResource] = []

    def to_setting(self) -> str:
        return self.model_dump_json(exclude_defaults=True)

    @classmethod
    def from_setting(cls, value: str | None) -> HandedPlace | None:
        """The handed place, or None when there is none (a session launched without one syncs
        the whole lab, as any labgrid client does) or it cannot be read."""
        if not value:
            return None
        try:
            return cls.model_validate_json(value)
        except ValueError:
            return None
