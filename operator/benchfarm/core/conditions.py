"""Kubernetes-style conditions: lastTransitionTime moves only when the status really changes."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

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


def set_condition(conditions: list[dict[str, Any]] | None, type_: str, status: str, reason: str,
                  message: str, generation: int | None = None) -> list[dict[str, Any]]:
    out = [dict(c) for c in (conditions or [])]
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


def get_condition(conditions: list[dict[str, Any]] | None, type_: str) -> dict[str, Any] | None:
    return next((c for c in conditions or [] if c.get("type") == type_), None)
