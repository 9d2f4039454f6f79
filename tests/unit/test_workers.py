"""operator.state.pools: a task's bug is heard (logged with its traceback, counted for the
BenchfarmOperatorBug alert), where a plain thread pool would keep it in a future nobody reads;
the pool goes on with the next task."""

from __future__ import annotations

import logging

import pytest

from benchfarm.operator.state import metrics
from benchfarm.operator.state.pools import Workers


def bugs() -> float:
    return metrics.REGISTRY.get_sample_value("benchfarm_operator_bugs_total") or 0.0


def test_a_tasks_bug_is_logged_and_counted_and_the_next_task_runs(caplog):
    before = bugs()
    def write_status(run: str) -> None:
        raise KeyError(run)
    with caplog.at_level(logging.ERROR, logger="benchfarm"), \
            Workers(max_workers=1, thread_name_prefix="round-writes") as pool:
        failed = pool.submit(write_status, "ns/r")
        with pytest.raises(KeyError):
            failed.result()
        assert pool.submit(lambda: 7).result() == 7
    assert bugs() == before + 1
    [record] = [r for r in caplog.records if "write_status" in r.getMessage()]
    assert "round-writes" in record.getMessage() and record.exc_info[0] is KeyError


def test_a_task_that_succeeds_counts_nothing():
    before = bugs()
    with Workers(max_workers=2, thread_name_prefix="launch") as pool:
        assert [f.result() for f in [pool.submit(pow, 2, n) for n in range(4)]] == [1, 2, 4, 8]
    assert bugs() == before
