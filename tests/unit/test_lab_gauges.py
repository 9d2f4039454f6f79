"""The lab's gauges (`operator.state.metrics`): the boards by state and the share of the online ones runs
hold, from a count of each state (the operator counts its boards once a second, not every round);
the queue's depth and how long its oldest entry has waited, every round."""

from __future__ import annotations

from collections import Counter

from benchfarm.operator.state import metrics


def gauge(name: str, **labels: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, labels)


def test_the_boards_by_state_and_the_utilisation_come_from_a_count() -> None:
    states = Counter({"Idle": 5, "Busy": 3, "Offline": 2})
    metrics.observe_boards(states, running=3)
    assert gauge("benchfarm_boards", state="Idle") == 5
    assert gauge("benchfarm_boards", state="Busy") == 3
    assert gauge("benchfarm_boards", state="Offline") == 2
    assert gauge("benchfarm_boards", state="Quarantined") == 0
    assert gauge("benchfarm_board_utilisation_ratio") == 3 / 8      # offline boards left out
    metrics.observe_boards(Counter({"Offline": 4}), running=0)
    assert gauge("benchfarm_boards", state="Idle") == 0
    assert gauge("benchfarm_board_utilisation_ratio") == 0.0


def test_the_queue_gauges_are_set_every_round() -> None:
    metrics.observe_lab(queued=7, running=2, standby=1, oldest_wait=95.5)
    assert gauge("benchfarm_queue_depth") == 7
    assert gauge("benchfarm_runs_running") == 2
    assert gauge("benchfarm_queue_oldest_wait_seconds") == 95.5
    metrics.observe_lab(queued=0, running=2)
    assert gauge("benchfarm_queue_oldest_wait_seconds") == 0
