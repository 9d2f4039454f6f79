"""A session launched on standby: it waits for the operator's go-ahead (a free session seat,
`api.grants.GoAhead`) before it takes its board, or for the relay the go-ahead names (the place
whose holder gives the seat up) to be released. The run's Lease thread hands it every update of
the run (`note_go_ahead`); the board's work waits on it (`wait`).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from benchfarm.api.grants import Relay
from benchfarm.api.outcomes import RunFailure, attempt_of
from benchfarm.api.runs import BenchmarkRunStatus
from benchfarm.core.policy import trust
from benchfarm.errors import RunError
from benchfarm.kubeapi.client import Kube
from benchfarm.lab.coordinator import Coordinator
from benchfarm.lab.session import Cancelled
from benchfarm.session.context import Config, RunContext
from benchfarm.session.lifeline import Lifeline

log = logging.getLogger("benchfarm.session")


class Standby:
    """The go-ahead of one attempt of a run, as the operator signed it."""

    def __init__(self, config: Config, kube: Kube, coordinator: Coordinator, lifeline: Lifeline,
                 attempt: int) -> None:
        self.config, self.kube = config, kube
        self.coordinator, self.lifeline = coordinator, lifeline
        self.attempt = attempt            # the attempt this session was launched for
        self.go_ahead = threading.Event()
        self.relay: Relay | None = None      # the seat it waits for, if the operator named one
        self.go_ahead_by = ""

    def note_go_ahead(self, uid: str, body: dict[str, Any]) -> None:
        """The run as this session last saw it: its go-ahead, if the operator signed one for
        the attempt this session was launched for (a tenant's write is not one)."""
        status = body.get("status") or {}
        attempt = attempt_of(status)
        try:
            key = trust.key_from(self.config.settings.signing_key)
        except ValueError:   # the session fails on its suites' signature first, and says why
            return
        go = trust.read_go_ahead(key, uid, attempt, BenchmarkRunStatus.of(status).goAhead)
        if go is None or attempt != self.attempt:
            return
        if go.after is None:
            self._go("the operator's")
        elif go.after != self.relay:    # its seat is the one this holder gives up
            self.relay = relay = go.after
            self.coordinator.on_release(relay.place, relay.holder,
                                        lambda: self._go(f"relay: {relay.place} released"))

    def _go(self, by: str) -> None:
        if not self.go_ahead.is_set():
            self.go_ahead_by = by
            self.go_ahead.set()

    def wait(self, ctx: RunContext, *, spec_started: bool) -> None:
        """Launched on standby: ready to take the board, wait for the operator's go-ahead (a
        free session seat; `api.grants.GoAhead`). The run's time counts from the go-ahead."""
        if self.go_ahead.is_set():
            return
        log.info("%s/%s: on standby; waiting for the operator's go-ahead", ctx.namespace,
                 ctx.name)
        t = time.monotonic()
        while not self.go_ahead.wait(0.5):
            self.lifeline.check()
            if self.lifeline.cancel.is_set():
                raise Cancelled("cancelled on standby, before it took its board")
            if time.monotonic() > self.lifeline.deadline:
                raise RunError(f"no session seat became free within the run's timeout "
                               f"({ctx.spec.timeoutSeconds} s)", reason=RunFailure.run_timeout)
        log.info("%s/%s: go-ahead after %.2f s on standby (%s)", ctx.namespace, ctx.name,
                 time.monotonic() - t, self.go_ahead_by)
        if not spec_started:      # the run's time starts with its board
            ctx.deadline = self.lifeline.deadline = time.monotonic() + ctx.spec.timeoutSeconds
            self.kube.outage_budget = max(10.0, ctx.spec.timeoutSeconds)
