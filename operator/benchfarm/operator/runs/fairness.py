"""The queue's round-robin turn order, kept across restarts: who was served last in each
namespace (`core.scheduling.fairness.RoundRobinFairness.last_served`) lives in the ConfigMap
FAIRNESS_CONFIG_MAP of the operator's namespace, read back at a start (`load`) and written after a
round that served someone (`save`, on the round writes' thread: a round never waits for it), so
a restart or a new leader does not reorder the queue.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import Executor
from typing import Protocol

from benchfarm.api.base import FAIRNESS_CONFIG_MAP, FAIRNESS_KEY
from benchfarm.core.scheduling.fairness import RoundRobinFairness
from benchfarm.kubeapi.client import API_FAILURES
from benchfarm.operator.state.owner import Owner

log = logging.getLogger("benchfarm")


class FairnessKube(Protocol):
    """What the turn order's keeping asks of the Kubernetes API (`kubeapi.client.Kube` is one)."""

    def get_config_map(self, namespace: str, name: str) -> dict[str, str] | None: ...

    def put_config_map(self, namespace: str, name: str, data: dict[str, str]) -> None: ...


class FairnessBook:
    def __init__(self, kube: FairnessKube, namespace: str, fairness: RoundRobinFairness,
                 owner: Owner, writer: Executor) -> None:
        """`owner`: the thread whose rounds serve (`operator.state.owner`), the only one that changes
        `fairness`; `writer`: the thread of the round's writes."""
        self.kube = kube
        self.namespace = namespace
        self.fairness = fairness
        self.owner = owner
        self.writer = writer
        self.saved: dict[str, float] = {}   # as last written
        self.due = False                    # a write on its way

    def load(self) -> None:
        """Round-robin state from before a restart, so a restart does not reorder the queue."""
        data = self.kube.get_config_map(self.namespace, FAIRNESS_CONFIG_MAP) or {}
        try:
            served = {k: float(v) for k, v in json.loads(data.get(FAIRNESS_KEY, "{}")).items()}
        except (ValueError, AttributeError):
            log.warning("ConfigMap %s is unreadable; fairness starts afresh", FAIRNESS_CONFIG_MAP)
            served = {}
        self.fairness.last_served.update(served)
        self.saved = dict(self.fairness.last_served)

    def save(self) -> None:
        """One write after a round that served someone; none otherwise. On the writer thread:
        the next round never waits for it."""
        current = self.owner.call(dict, self.fairness.last_served)
        if current == self.saved or self.due:
            return
        self.due = True
        self.writer.submit(self._write)

    def _write(self) -> None:
        self.due = False
        current = self.owner.call(dict, self.fairness.last_served)
        if current == self.saved:
            return
        try:
            self.kube.put_config_map(self.namespace, FAIRNESS_CONFIG_MAP,
                                     {FAIRNESS_KEY: json.dumps(current, sort_keys=True)})
            self.saved = current
        except API_FAILURES as exc:  # fairness is kept in memory; the next round tries again
            log.warning("could not save the fairness state: %s", exc)
