"""Kubernetes-style conditions: lastTransitionTime moves only when the status really changes."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

# a status's conditions as read: its typed model's (`api.base.Condition`) or the raw dicts
Conditions = Sequence[BaseModel | Mapping[str, Any]] | None


def _raw(c: BaseModel | Mapping[str, Any]) -> dict[str, Any]:
    return c.model_dump(exclude_none=True) if isinstance(c, BaseModel) else dict(c)


def as_written(conditions: Conditions) -> list[dict[str, Any]]:
    """The conditions as a status write carries them (the others are written back as read)."""
    return [_raw(c) for c in conditions or []]


#: The form of every time the lab writes into a status, an event or a lease's access (Kubernetes'
#: own: UTC, whole seconds), and reads back (`seconds_of`).
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def iso(t: float | datetime | None = None) -> str:
    """`t` in TIME_FORMAT: seconds since the epoch, or a UTC datetime; None: now."""
    when = t if isinstance(t, datetime) else \
        datetime.fromtimestamp(time.time() if t is None else t, UTC)
    return when.strftime(TIME_FORMAT)


def seconds_of(value: str) -> float:
    """A time written in TIME_FORMAT, as seconds since the epoch."""
    return datetime.strptime(value, TIME_FORMAT).replace(tzinfo=UTC).timestamp()


def now_iso() -> str:
    return iso()


def set_condition(conditions: Conditions, type_: str, status: str, reason: str,
                  message: str, generation: int | None = None) -> list[dict[str, Any]]:
    out = as_written(conditions)
    new: dict[str, Any] = {"type": type_, "status": status, "reason": reason, "message": message[:4000],
           "lastTransitionTime": now_iso()}
    if generation is not None:
        new["observedGeneration"] = generation
    for i, c in enumerate(out):
        if c.get("type") == type_:
            if c.get("status") == status:
                new["lastTransitionTime"] = c.get("lastTransitionTime", new["lastTransitionTime"])
            out[i] = new
            return out
    out.append(new)
    return out


def get_condition(conditions: Conditions, type_: str) -> dict[str, Any] | None:
    return next((raw for c in conditions or [] if (raw := _raw(c)).get("type") == type_), None)
