"""The misuse suite's table: every attempt records one row; `make misuse` prints them at the end.

A row: what a tenant tried, what benchfarm did, and whether anything leaked (another tenant's
data read or a lab service reached), was lost (a run's evidence or finished steps), or was charged
(a healthy board blamed). Any breach fails its test, so `make misuse` exits non-zero.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROWS: list[dict] = []
TABLE = Path(os.environ.get("BENCHFARM_STATE", Path(__file__).resolve().parents[2] / ".benchfarm")) \
    / "misuse.json"


@pytest.fixture
def attempt():
    def _record(tried: str, did: str, *, leaked: bool = False, lost: bool = False,
                charged: int = 0) -> bool:
        ok = not leaked and not lost and charged == 0
        ROWS.append({"tried": tried, "did": did, "leaked": leaked, "lost": lost,
                     "charged": charged, "ok": ok})
        return ok
    return _record


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # noqa: ARG001
    if not ROWS:
        return
    tr = terminalreporter
    tr.section("misuse: one line per attempt")
    tr.write_line(f"{'what a tenant tried':52} {'what benchfarm did':52} leaked lost charged  "
                  f"verdict")
    for r in ROWS:
        tr.write_line(f"{r['tried'][:52]:52} {r['did'][:52]:52} {'yes' if r['leaked'] else 'no':6} "
                      f"{'yes' if r['lost'] else 'no':4} {r['charged']:7}  "
                      f"{'blocked/harmless' if r['ok'] else 'BREACH'}")
    TABLE.parent.mkdir(parents=True, exist_ok=True)
    TABLE.write_text(json.dumps(ROWS, indent=2))
