"""Kubernetes-style conditions: lastTransitionTime moves only when the status really changes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
