"""shell: a command whose only result is whether it succeeded (setup steps, smoke checks)."""

from __future__ import annotations

from benchfarm.suites.base import Metric


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    return []
