"""What the operator hands a board session about its place at launch: one typed definition.

The operator keeps the whole lab in view (every place and resource, from its one labgrid client).
A session needs only its own place: the operator hands it what it knows of that place (tags,
matches, the resources they match, as labgrid's coordinator lists them) in the launch environment
(`BENCHFARM_RUN_PLACE`), and the session's labgrid client starts from that instead of syncing the
whole lab (1,000 places and 2,000 resources per session launch at scale). Nothing in it is trusted
for the lock: who holds the place is always the coordinator's word (lab/coordinator.py).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

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

    def to_env(self) -> str:
        return self.model_dump_json(exclude_defaults=True)

    @classmethod
    def from_env(cls, value: str | None) -> HandedPlace | None:
        """The handed place, or None when there is none (a session launched without one syncs
        the whole lab, as any labgrid client does) or it cannot be read."""
        if not value:
            return None
        try:
            return cls.model_validate_json(value)
        except ValueError:
            return None
