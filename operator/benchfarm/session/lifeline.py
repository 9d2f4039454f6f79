"""A session's hold on its run: the run's Lease, the watch for cancel and delete, and outages.
(A health check's session holds its own Lease the same way, `session.health`.)

The Lease is how the operator knows a session lives (`operator.runs.sessions`) and how two sessions of one
run never both touch the board: a session whose Lease was taken over is fenced and stops at once.
The watch on its run brings `spec.cancel` and a delete to the session within a second or two,
and the operator's go-ahead to a session on standby.
`wait_out` is the one place outages of the lab's services are waited out, bounded by the run's
own timeout and never blamed on a board.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from benchfarm.api.base import GROUP, VERSION
from benchfarm.api.outcomes import RunFailure
from benchfarm.errors import Outage, RunError
from benchfarm.kubeapi.client import API_FAILURES, WATCH_FAILURES, Kube
from benchfarm.kubeapi.leases import (
    LeaseHolder,
    LeaseLost,
    session_lease_labels,
    session_lease_name,
    session_lease_owner,
)
from benchfarm.lab.session import Cancelled

log = logging.getLogger("benchfarm.session")
T = TypeVar("T")


class Fenced(Exception):
    """This session lost its Lease: another session of the run owns the board now."""


class Lifeline:
    """The Lease, the run watch and the three events every part of a session looks at."""

    def __init__(self, kube: Kube, namespace: str, name: str, uid: str, identity: str,
                 api_version: str, *, lease_seconds: int, renew_seconds: float,
                 lease: LeaseHolder | None = None) -> None:
        """`lease`: another Lease than the run's own (a health check's, `session.health`):
        then there is no run to watch, and `start` only renews it."""
        self.kube, self.namespace, self.name, self.uid = kube, namespace, name, uid
        self.watch_run = lease is None
        self.renew_seconds = renew_seconds
        self.lease_seconds = lease_seconds
        self.fenced = threading.Event()
        self.cancel = threading.Event()
        self.deleting = threading.Event()
        self.deadline = float("inf")               # monotonic: the run's timeout
        self.on_stop: Callable[[], None] = lambda: None          # wake a blocked console
        self.on_tick: Callable[[], None] = lambda: None          # deferred status writes
        self.on_wait: Callable[[str], None] = lambda text: None  # "waiting for the store"
        self.on_run: Callable[[dict[str, Any]], None] = lambda body: None   # each run it watches
        self.lease = lease or LeaseHolder(
            kube, namespace, session_lease_name(name), identity, duration=lease_seconds,
            labels=session_lease_labels(uid), owner=session_lease_owner(api_version, name, uid))

    # -- the Lease ----------------------------------------------------------------------------
    def take(self) -> bool:
        """Take the run's Lease (a dead session's runs out after its duration)."""
        deadline = time.monotonic() + 2 * self.lease_seconds + 5
        while time.monotonic() < deadline:
            if self.lease.try_acquire():
                return True
            time.sleep(1.0)
        return False

    def start(self) -> None:
        threading.Thread(target=self._renew_loop, name="lease", daemon=True).start()
        if self.watch_run:
            threading.Thread(target=self._watch_run, name="watch-run", daemon=True).start()

    def release(self) -> None:
        if not self.fenced.is_set():
            self.lease.release()

    def _renew_loop(self) -> None:
        while not self.fenced.is_set():
            time.sleep(self.renew_seconds)
            try:
                self.lease.renew()
                self.on_tick()
            except LeaseLost as exc:
                log.warning("%s", exc)
                self.fence()
                return
            except API_FAILURES as exc:  # the API server may be down: keep trying, keep working
                log.warning("lease renewal failed (will retry): %s", exc)
            except Exception:         # a bug must not stop the renewals: the session would die
                log.exception("lease renewal failed with a bug (will retry)")

    def fence(self) -> None:
        self.fenced.set()
        self.on_stop()

    def check(self) -> None:
        if self.fenced.is_set():
            raise Fenced()

    # -- cancel and delete --------------------------------------------------------------------
    def _watch_run(self) -> None:
        """Cancel or delete of the run reaches the session within a second or two."""
        from kubernetes import watch
        while not self.fenced.is_set():
            try:
                w = watch.Watch()
                for event in w.stream(self.kube.custom.list_namespaced_custom_object, GROUP,
                                      VERSION, self.namespace, "benchmarkruns",
                                      field_selector=f"metadata.name={self.name}",
                                      timeout_seconds=60):
                    obj = event["object"]
                    meta = obj.get("metadata", {})
                    if meta.get("uid") != self.uid or event["type"] == "DELETED" or \
                            meta.get("deletionTimestamp"):
                        self.cancelled(deleting=True)
                        return
                    if (obj.get("spec") or {}).get("cancel"):
                        self.cancelled(deleting=False)
                        return
                    self.on_run(obj)
            except WATCH_FAILURES as exc:   # the API server away, or the watch expired (410)
                log.debug("run watch interrupted: %s", exc)
                time.sleep(2.0)
            except Exception:               # a bug must not stop the watch: cancels come by it
                log.exception("the run's watch failed with a bug (watching again)")
                time.sleep(2.0)

    def cancelled(self, *, deleting: bool) -> None:
        if deleting:
            self.deleting.set()
        self.cancel.set()
        self.on_stop()

    # -- outages ------------------------------------------------------------------------------
    def wait_out(self, what: str, fn: Callable[[], T]) -> T:
        """Call fn until it stops failing with an outage; OutageOutlastedRun when the run's
        time is up (the lab's fault, not the run's).
        A cancel ends the wait too: a cancelled run does not wait for a store that is down."""
        delay = 1.0
        while True:
            self.check()
            try:
                return fn()
            except Outage as exc:
                if time.monotonic() + delay > self.deadline:
                    raise RunError(f"the run's timeout ran out while waiting for the {exc.party} "
                                   f"({what}): {exc}",
                                   reason=RunFailure.outage_outlasted_run) from exc
                if self.cancel.is_set():
                    raise Cancelled(f"cancelled while waiting for the {exc.party} ({what})") \
                        from exc
                log.warning("%s: %s is unavailable (%s); waiting %.0f s", what, exc.party, exc,
                            delay)
                self.on_wait(f"waiting for the {exc.party} ({what})")
                self.cancel.wait(delay)
                delay = min(delay * 2, 30.0)


def api_version_of(body: dict[str, Any]) -> str:
    return str(body.get("apiVersion") or f"{GROUP}/{VERSION}")
