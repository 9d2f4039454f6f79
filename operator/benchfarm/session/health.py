"""`benchfarm session health BOARD CHECK`: a quarantined board's health check, as a session.

The operator never opens a board's console (the design: it schedules, sessions touch boards), so
a board it quarantined is checked the way runs are run: the launcher starts this session (a
process, or a Job), which holds a Lease of its own (`benchfarm-health-<board>` in the operator's
namespace, owned by the Board) and acquires the place under an identity of its own, one per check
(`api.places.health_identity`). It powers the board on with its own image, waits for the
prompt (the device type's boot, its retries too), powers it off, releases the place and writes
the verdict to the Board's `status.healthCheckEnd` (`api.outcomes.HealthCheckEnd`) before it
gives up its Lease. The operator acts on that verdict: back in service, or quarantined again
until the next check after the cooldown; a check whose session dies is given up the same way
(its Lease stops moving) and the place it held is released by the operator.

A session whose Lease was taken over stops touching the board at once and writes no verdict
(fenced, as a run's session); one whose place someone else took fails the check without touching
the board again. The operator heeds only the verdict of its latest check.
"""

from __future__ import annotations

import logging
import os
import socket
import time

from benchfarm.api.base import GROUP, VERSION
from benchfarm.api.outcomes import HealthCheckEnd, HealthVerdict, RunFailure, fault_words
from benchfarm.api.places import health_identity
from benchfarm.errors import BoardBusy, InfraError
from benchfarm.kubeapi.client import Kube
from benchfarm.kubeapi.leases import (
    HEALTH_LEASE_LABEL,
    SESSION_LEASE_LABEL,
    LeaseHolder,
    health_lease_name,
)
from benchfarm.lab.board import SerialLog
from benchfarm.lab.coordinator import Coordinator
from benchfarm.lab.devicetypes import load_device_types
from benchfarm.lab.environment import labgrid_variables
from benchfarm.lab.session import BoardSession
from benchfarm.session.context import Config
from benchfarm.session.lifeline import Fenced, Lifeline
from benchfarm.settings import Settings

log = logging.getLogger("benchfarm.session")

CONSOLE_IN_MEMORY = 1024 * 1024    # bytes of the check's console kept (its head and its tail)
SETUP_SECONDS = 600.0              # outages waited out before the board's boot is even tried


class HealthCheckSession:
    def __init__(self, board: str, check: int, config: Config, namespace: str) -> None:
        self.board, self.check, self.config, self.namespace = board, check, config, namespace
        self.kube = Kube(config.settings, outage_budget=600.0)
        self.identity = f"{socket.gethostname()}/{os.getpid()}"
        self.session: BoardSession | None = None

    def run(self) -> int:
        body = self.kube.get_cluster("boards", self.board)
        if body is None:
            log.info("board %s does not exist; nothing to check", self.board)
            return 0
        expected = self.config.settings.board_uid
        if expected and body["metadata"]["uid"] != expected:
            log.info("board %s was re-created (uid differs); nothing to check", self.board)
            return 0
        host, user = health_identity(self.board, self.check)
        self.coordinator = Coordinator.from_settings(self.config.settings,
                                                     address=self.config.coordinator,
                                                     host=host, user=user)
        self.coordinator.connect_soon()
        lease = LeaseHolder(
            self.kube, self.namespace, health_lease_name(self.board), self.identity,
            duration=self.config.lease_seconds,
            labels={SESSION_LEASE_LABEL: "true", HEALTH_LEASE_LABEL: "true",
                    "app.kubernetes.io/managed-by": "benchfarm"},
            owner={"apiVersion": f"{GROUP}/{VERSION}", "kind": "Board", "name": self.board,
                   "uid": body["metadata"]["uid"], "controller": True,
                   "blockOwnerDeletion": False})
        self.lifeline = Lifeline(self.kube, self.namespace, self.board, body["metadata"]["uid"],
                                 self.identity, f"{GROUP}/{VERSION}",
                                 lease_seconds=self.config.lease_seconds,
                                 renew_seconds=self.config.renew_seconds, lease=lease)
        self.lifeline.on_stop = self._stop_board
        self.lifeline.deadline = time.monotonic() + SETUP_SECONDS   # until the device type is known
        try:
            if not self.lifeline.take():
                log.warning("another session holds the Lease of %s's health check; exiting",
                            self.board)
                return 3
            self.lifeline.start()
            log.info("health check %d of %s: session %s holds its Lease", self.check,
                     self.board, self.identity)
            try:
                end = self._check()
                self.lifeline.check()
                self.kube.patch_board_status(self.board,
                                             {"healthCheckEnd": end.model_dump(mode="json")})
                log.info("health check %d of %s: %s %s", self.check, self.board, end.verdict,
                         end.message)
                return 0
            except Fenced:
                log.warning("health check %d of %s was fenced (its Lease taken over); it no "
                            "longer touches the board and says nothing", self.check, self.board)
                return 4
            finally:
                self.lifeline.release()
        finally:
            self.coordinator.close()

    def _stop_board(self) -> None:
        if self.session is not None:
            self.session.stop()

    def _check(self) -> HealthCheckEnd:
        """Boot the board's own image to its prompt; the verdict, whatever happened. The
        verdict is on the Board, which every namespace reads: its message is the lab's words
        for the kind of failure (`api.outcomes.fault_words`), what the console said is in this
        session's log."""
        try:
            self._boot()
        except Fenced:
            raise
        except Exception as exc:
            self.lifeline.check()
            code = getattr(exc, "reason", type(exc).__name__)
            log.info("health check %d of %s failed: %s: %s", self.check, self.board, code, exc,
                     exc_info=not hasattr(exc, "reason"))     # not one of ours: its traceback
            return HealthCheckEnd(check=self.check, verdict=HealthVerdict.failed,
                                  reason=str(code), message=fault_words(str(code)))
        return HealthCheckEnd(check=self.check, verdict=HealthVerdict.passed,
                              message="booted to its prompt")

    def _boot(self) -> None:
        wait = self.lifeline.wait_out
        places = wait("read the places", self.coordinator.places)
        info = places.get(self.board)
        dtype = load_device_types(self.config.device_types).get(
            info.tags.get("device_type", "") if info else "")
        if info is None or dtype is None:
            raise InfraError(f"place {self.board} vanished or has an unknown device type",
                             reason=RunFailure.place_missing)
        self.lifeline.deadline = time.monotonic() + dtype.health_check_seconds
        wait("acquire the place", lambda: self.coordinator.acquire(self.board))
        try:
            self.session = BoardSession(
                self.board, info.resources, dtype,
                wait("connect to the coordinator", self.coordinator.session),
                deadline=self.lifeline.deadline, serial_log=SerialLog(limit=CONSOLE_IN_MEMORY),
                guard=self._guard, labgrid_variables=labgrid_variables(self.config.settings))
            try:
                self.session.boot()
            finally:
                self._power_off(self.session)
        finally:
            if not self.lifeline.fenced.is_set():
                wait("release the place", lambda: self.coordinator.release(self.board))

    def _power_off(self, session: BoardSession) -> None:
        if self.lifeline.fenced.is_set():
            session.close()
        else:
            session.power_off_and_close(passes=(Fenced,))

    def _guard(self) -> None:
        """Before every power operation: still our Lease, still our place."""
        self.lifeline.check()
        holder = self.lifeline.wait_out("check the place",
                                        lambda: self.coordinator.holder(self.board))
        if holder == self.coordinator.identity:
            return
        if holder is None:   # the coordinator restarted and forgot every lock: take it back
            self.lifeline.wait_out("re-acquire the place",
                                   lambda: self.coordinator.acquire(self.board))
            return
        raise BoardBusy(f"place {self.board} is now held by {holder}; not touching it")


def main(board: str, check: int | str) -> int:
    from benchfarm.logs import configure
    settings = Settings.from_env()
    configure(settings.log_level)
    namespace = settings.health_namespace or settings.namespace
    return HealthCheckSession(board, int(check), Config.from_settings(settings), namespace).run()
