"""The ends a round finds due and no run waits for: a waiting run past its queue timeout is
failed, a finished run past its TTL deleted (`RunEnds`, after every round).

Both are written on the writer thread, once a run at a time: however many runs a tenant times
out together, the owner's thread makes no API round trip for them. The record changes when the
write comes back (`RunWrites._wrote`) or with the watch event; an outage leaves it to the next
round.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import ParamSpec, Protocol

from benchfarm.api.outcomes import FINISHED, Phase, RunFailure
from benchfarm.kubeapi.client import API_FAILURES, Kube
from benchfarm.operator.runs.writes import RunWrites
from benchfarm.operator.state.owner import Owner
from benchfarm.operator.state.pools import Workers
from benchfarm.operator.state.records import RunState, ts

log = logging.getLogger("benchfarm")
P = ParamSpec("P")


class EndsRuntime(Protocol):
    """What the ends need of the operator (`operator.runtime.Runtime` is one)."""

    @property
    def owner(self) -> Owner: ...

    @property
    def kube(self) -> Kube: ...

    @property
    def writes(self) -> RunWrites: ...

    @property
    def writer(self) -> Workers: ...


class RunEnds:
    def __init__(self, rt: EndsRuntime) -> None:
        self.rt = rt
        self.ending: set[str] = set()   # runs whose queue-timeout or TTL write is on its way

    def expire(self, waiting: list[RunState], now: float) -> None:
        for r in waiting:
            limit = r.spec.queueTimeoutSeconds
            if limit and now - r.created > limit and r.waiting:
                self._apart(r, self.rt.writes.finish, r, Phase.failed, RunFailure.queue_timeout,
                            f"no matching board became free within {limit} s")

    def ttl(self, runs: list[RunState], now: float) -> None:
        for r in runs:
            ttl = r.spec.ttlSecondsAfterFinished
            done = r.status.get("completionTime")
            if ttl is None or not done or r.phase not in FINISHED:
                continue
            if r.completed_at is None or r.completed_at[0] != done:
                r.completed_at = (done, ts(done))     # parsed once, not every round
            if now - r.completed_at[1] >= ttl:
                self._apart(r, self.rt.kube.delete_run, r.namespace, r.name)

    def _apart(self, run: RunState, write: Callable[P, None], *args: P.args,
               **kwargs: P.kwargs) -> None:
        if run.key in self.ending:
            return
        self.ending.add(run.key)

        def end() -> None:
            try:
                write(*args, **kwargs)
            except API_FAILURES as exc:
                log.warning("%s: its end was not written (%s); again at the next round",
                            run.key, exc)
            finally:
                self.rt.owner.post(self.ending.discard, run.key)
        self.rt.writer.submit(end)
