"""Shared test setup: where the tests' own data lives (tests/data), so a fresh clone runs green.

`samples/` holds real tool outputs (see its INDEX.md); `guides/` holds data-only excerpts of vendor
guides (section titles, csv-tables, tool dumps; no prose), cut with hack/guide_excerpt.py.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
SAMPLES = DATA / "samples"
GUIDES = DATA / "guides"


def sample(rel: str) -> str:
    return (SAMPLES / rel).read_text(errors="replace")


def guide(name: str) -> str:
    return (GUIDES / name).read_text()
