"""The chaos suite's table: every scenario records one row; `make chaos` prints them at the end.

A row: scenario, outcome (the run's phase and reason), recovery seconds (from the end of the
disruption until the run made progress again), steps redone (artifacts of steps finished before
the disruption that were written again) and boards charged (board-fault counts added).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROWS: list[dict] = []
TABLE = Path(os.environ.get("BENCHFARM_STATE", Path(__file__).resolve().parents[2] / ".benchfarm")) \
    / "chaos.json"


@pytest.fixture
def record():
    def _record(scenario: str, outcome: str, recovery_s: float | None, redone: int,
                charged: int, ok: bool) -> None:
        ROWS.append({"scenario": scenario, "outcome": outcome,
                     "recovery_s": None if recovery_s is None else round(recovery_s, 1),
                     "steps_redone": redone, "boards_charged": charged, "ok": ok})
    return _record


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # noqa: ARG001
    if not ROWS:
        return
    tr = terminalreporter
    tr.section("chaos: one line per scenario")
    tr.write_line(f"{'scenario':46} {'outcome':28} {'recovery s':>10} {'redone':>6} "
                  f"{'charged':>7}  verdict")
    for r in ROWS:
        rec = "-" if r["recovery_s"] is None else f"{r['recovery_s']:.1f}"
        tr.write_line(f"{r['scenario']:46} {r['outcome'][:28]:28} {rec:>10} "
                      f"{r['steps_redone']:>6} {r['boards_charged']:>7}  "
                      f"{'ok' if r['ok'] else 'LOSS'}")
    TABLE.parent.mkdir(parents=True, exist_ok=True)
    TABLE.write_text(json.dumps(ROWS, indent=2))
