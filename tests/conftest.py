"""Shared test setup: where the tests' own data lives (tests/data), so a fresh clone runs green.

`samples/` holds real tool outputs (see its INDEX.md); `guides/` holds data-only excerpts of vendor
guides (section titles, csv-tables, tool dumps; no prose), cut with hack/guide_excerpt.py.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
SAMPLES = DATA / "samples"
GUIDES = DATA / "guides"


# `make test` stays inside CI's time: a scenario marked `full` (a second moment of the same kill,
# a longer outage of the same service) is the heavier variant of one that runs there; its own
# target (make chaos, make misuse, make test-full) sets BENCHFARM_FULL=1 and runs it too.
FULL = os.environ.get("BENCHFARM_FULL") == "1"


def pytest_collection_modifyitems(config, items):  # noqa: ARG001
    if FULL:
        return
    skip = pytest.mark.skip(reason="full variant: BENCHFARM_FULL=1 (make test-full; make chaos, "
                                   "make misuse)")
    for item in items:
        if item.get_closest_marker("full"):
            item.add_marker(skip)


def sample(rel: str) -> str:
    return (SAMPLES / rel).read_text(errors="replace")


def guide(name: str) -> str:
    return (GUIDES / name).read_text()


# What a failed test on the real stack (stack, chaos, misuse) shows of the lab: the operator's log
# as it grew during the test, and each session log the test wrote, by their last lines. CI keeps
# nothing else of a clean clone's lab, and a rare failure's cause is in them.
_TAIL_LINES = 40
_MARK = pytest.StashKey[tuple[Path, float, int]]()   # the lab's logs; at the test's start: the
#                                                      time and the operator log's size


def _lab_logs(item) -> Path | None:
    if "unit" in item.path.relative_to(REPO).parts:
        return None
    import benchfarm_devlab as devlab
    return devlab.STATE / "logs"


def _tail(path: Path, start: int = 0) -> str:
    with open(path, "rb") as f:
        f.seek(start)
        return "\n".join(f.read().decode(errors="replace").splitlines()[-_TAIL_LINES:])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    logs = _lab_logs(item)
    if logs is not None:
        op = logs / "benchfarm-operator.log"
        item.stash[_MARK] = (logs, time.time(), op.stat().st_size if op.exists() else 0)
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    mark = item.stash.get(_MARK, None)
    if call.when != "call" or not report.failed or mark is None:
        return
    logs, since, offset = mark
    op = logs / "benchfarm-operator.log"
    if op.exists():
        grown = offset if op.stat().st_size >= offset else 0     # 0: the log was started anew
        report.sections.append(("the operator's log during the test", _tail(op, grown)))
    written = sorted((p for p in (logs / "sessions").glob("*.log") if p.stat().st_mtime >= since),
                     key=lambda p: p.stat().st_mtime)
    for path in written[-6:]:
        report.sections.append((f"session log {path.name}", _tail(path)))
