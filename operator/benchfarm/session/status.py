"""What a session writes to its run: coalesced progress, the end of the run, or a hand-back.

Progress is courtesy: at most one write per period (which grows with the session's age, so a
6-hour soak costs ~50 writes), flushed by the Lease thread, and never holding the board up while
the API server is down (the checkpoints in the store are what a resume relies on). The end of a
run (`finish`) and a hand-back to the operator (`hand_back`, typed by `api.outcomes`) are waited
for, bounded by the run's timeout.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from typing import Any

from benchfarm.api.outcomes import Condition, HandBack, Phase, SessionEnd
from benchfarm.api.runs import BenchmarkRunStatus
from benchfarm.core.conditions import as_written, now_iso, set_condition
from benchfarm.core.scheduling import transitions
from benchfarm.errors import Outage
from benchfarm.kubeapi.client import Kube
from benchfarm.lab.session import Cancelled
from benchfarm.session.lifeline import Lifeline

log = logging.getLogger("benchfarm.session")

STATUS_EVERY = 15.0         # seconds: progress writes are coalesced to at most one per period,
STATUS_SHARE = 0.125        # which grows with the session's age (a 6-hour soak: ~50 writes)


class StatusWriter:
    def __init__(self, kube: Kube, lifeline: Lifeline, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        self.kube, self.lifeline = kube, lifeline
        self.quick = copy.copy(kube)      # progress writes: never hold the board up
        self.quick.outage_budget = 3.0
        self.namespace, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.api_version = body["apiVersion"]
        self.generation = meta.get("generation")
        # written back whole with each condition it sets (`core.conditions.set_condition`)
        self.conditions = as_written(BenchmarkRunStatus.of(body.get("status")).conditions)
        self.pending: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.last_write = self.started = time.monotonic()    # the launch was the last write

    def ref(self) -> dict[str, Any]:
        return {"apiVersion": self.api_version, "kind": "BenchmarkRun",
                "metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid}}

    def event(self, type_: str, reason: str, message: str) -> None:
        self.kube.event(self.ref(), type_, reason, message)

    def write(self, status: dict[str, Any], *, quick: bool = False) -> None:
        """One status write, typed as the operator's are (`core.scheduling.transitions.typed`)."""
        self.lifeline.check()
        kube = self.quick if quick else self.kube
        if not kube.patch_run_status(self.namespace, self.name, transitions.typed(status)):
            self.lifeline.cancelled(deleting=True)
            raise Cancelled("run deleted")
        self.last_write = time.monotonic()

    def due(self) -> bool:
        now = time.monotonic()
        return now - self.last_write >= max(STATUS_EVERY, STATUS_SHARE * (now - self.started))

    def flush(self) -> None:
        """Write deferred progress (from the Lease thread: status lags at most a few seconds)."""
        if not self.pending or not self.due():
            return
        with self.lock:
            pending = dict(self.pending)
            if not pending:
                return
            try:
                self.write(pending, quick=True)
                self.pending = {}
            except (Outage, Cancelled):
                pass

    def progress(self, text: str, reason: str, *, extra: dict[str, Any] | None = None,
                 force: bool = False, best_effort: bool = True) -> None:
        """Coalesced progress: at most one write per period unless forced. Every progress line
        is also logged (`kubectl logs job/...`)."""
        log.info("%s/%s: %s", self.namespace, self.name, text)
        new = dict(self.pending)
        new.update(extra or {})
        new["progress"] = text
        self.conditions = set_condition(self.conditions, Condition.succeeded, "Unknown", reason, text,
                                        self.generation)
        new["conditions"] = self.conditions
        self.pending = new
        if not force and not self.due():
            return
        with self.lock:
            try:
                self.write(new, quick=best_effort)
                self.pending = {}
            except (Outage, Cancelled):
                if not best_effort:
                    raise

    def condition(self, type_: str, status: str, reason: str, message: str) -> None:
        self.conditions = set_condition(self.conditions, type_, status, reason, message,
                                        self.generation)

    def finish(self, phase: Phase, reason: str, message: str,
               extra: dict[str, Any] | None = None) -> None:
        """The run's end, written once (waited for through outages)."""
        ok = "True" if phase == Phase.succeeded else "False"
        self.condition(Condition.succeeded, ok, reason, message)
        status = {**(extra or {}), "phase": phase, "completionTime": now_iso(),
                  "observedGeneration": self.generation, "conditions": self.conditions}
        if phase == Phase.cancelled or self.lifeline.deleting.is_set():
            status.pop("results", None)
        try:
            self.lifeline.wait_out("write the result", lambda: self.write(status))
        except Cancelled:
            return
        self.event("Normal" if ok == "True" else "Warning", reason, message)

    def hand_back(self, attempt: int, outcome: HandBack, exc: BaseException) -> None:
        """Give the run back to the operator, which charges the board or not and moves it."""
        end = SessionEnd(attempt=attempt, outcome=outcome,
                         reason=getattr(exc, "reason", type(exc).__name__),
                         message=str(exc)[:1000], party=getattr(exc, "party", "lab"))
        log.warning("session of %s/%s ends: %s (%s: %s)", self.namespace, self.name, outcome,
                    end.reason, end.message)
        try:
            self.lifeline.wait_out("report the end of the session", lambda: self.write(
                {"sessionEnd": end.model_dump(mode="json"),
                 "progress": f"{outcome.value}: {end.reason}"}))
        except Cancelled:
            return
