"""Shared test setup: paths to the shared samples and, for stack tests, the running lab."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("BENCHFARM_SHARED", REPO.parent / "shared"))
SAMPLES = SHARED / "samples"
SEEDS = SHARED / "seeds"


def sample(rel: str) -> str:
    path = SAMPLES / rel
    if not path.exists():
        pytest.skip(f"shared sample {rel} not present beside the clone")
    return path.read_text(errors="replace")
