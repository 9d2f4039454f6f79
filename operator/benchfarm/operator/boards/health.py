"""A board's faults, its quarantine, and the health checks that end it (`HealthChecks`).

Only board faults reach `board_failed`: outages and busy boards never count. After the policy's
limit the board is quarantined; a quarantined board's health check is a session like a run's
(`session.health`): launched through the operator's launcher (a process or a Job) with a number
of its own per board, so its labgrid identity and its Lease are its own; it reports its verdict in
the Board's `status.healthCheckEnd`. The operator never opens a board's console: it launches the
check, watches its Lease, and acts on the verdict (back in service, or quarantined until the next
check after the cooldown). A check whose session dies is given up like a failed one; the place it
held is released here.

A Board is read by every namespace: its reason, its events and its check's verdict name the kind
of fault in the lab's own words (`api.outcomes.fault_words`), never the message a run's session
handed back, which may quote a console line of that run's kernel or suite (that stays in the
run's own status, and in the operator's log).

The inventory (`operator.boards.inventory`) owns the board records and hands them here with the way to
publish a board's status; what the boards room needs of the operator is `BoardsRuntime`, here
(the registry's owner, the API, the coordinator, the policy, the device types, the launcher, its
namespace, the active runs and leases, a wake-up): no module of the room imports the runtime,
and this one not the inventory.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from benchfarm.api.notifications import EventKind
from benchfarm.api.outcomes import HealthCheck, HealthCheckEnd, HealthVerdict, LabFault, fault_words
from benchfarm.api.places import health_identity
from benchfarm.core.conditions import iso, now_iso
from benchfarm.core.notifications.events import board_event
from benchfarm.errors import InfraError
from benchfarm.kubeapi.client import API_FAILURES
from benchfarm.kubeapi.leases import (
    HEALTH_LEASE_LABEL,
    LeaseObserver,
    health_lease_name,
    list_leases,
)
from benchfarm.operator.launch.interface import LAUNCH_FAILURES, Launch, Launcher
from benchfarm.operator.state.records import (
    BoardRecord,
    Boards,
    Owned,
    Registry,
    RunState,
    ts,
    written,
)

if TYPE_CHECKING:
    from kubernetes.client import V1Lease

    from benchfarm.api.devicetype import DeviceType

log = logging.getLogger("benchfarm")
WATCH_EVERY = 2.0               # seconds between two looks at the health checks' Leases
HEALTH_STARTUP_GRACE = 45.0     # seconds a launched health check has to take its Lease


def _iso(t: float | None) -> str:
    return iso(t or time.time())


class BoardsRuntime(Registry, Protocol):
    """What the boards room (the inventory, its health checks, its place reads) needs of the
    operator's registry (`operator.runtime.Runtime` is one): the one Protocol between the room
    and the runtime, which it must not import."""

    namespace: str              # the operator's: health checks' Leases live there
    inventory_known: bool       # set once the coordinator's places have been read

    @property
    def device_types(self) -> Mapping[str, DeviceType]: ...

    @property
    def launcher(self) -> Launcher: ...

    def active_runs(self) -> list[RunState]: ...

    def active_lease_places(self) -> dict[str, str]: ...


class HealthChecks:
    def __init__(self, rt: BoardsRuntime, boards: Boards, sync: Callable[[str], None]) -> None:
        self.rt = rt
        self.boards = boards                # the inventory's records
        self.sync = sync                    # publishes a board's status (the inventory's `sync`)
        # board -> when its health check was launched
        self.checking: Owned[str, float] = Owned("board")
        self.clock = time.monotonic
        self.watch = CheckWatch(self)

    def load(self, rec: BoardRecord, st: dict[str, Any]) -> None:
        """A Board's last check and quarantine as its status has them, when the operator starts."""
        started = written(HealthCheck, st, "healthCheck")
        rec.health_check = started.check if started else 0
        if st.get("state") == "Quarantined":
            rec.quarantined_since = ts(st.get("quarantinedAt"))
            rec.reason = st.get("reason")
            end = written(HealthCheckEnd, st, "healthCheckEnd")
            if started and (end is None or end.check < started.check or
                            end.verdict == HealthVerdict.passed) and \
                    ts(started.startedAt or None) >= rec.quarantined_since:
                # its latest check, started in this quarantine, runs (its Lease tells) or
                # passed before the operator could act on it: adopted
                rec.run = f"(health check {started.check})"
                self.checking[rec.name] = self.clock()
                self.observe_health(rec.name, st)

    # -- faults and quarantine ----------------------------------------------------------------
    # (from any thread: each is made on the owner's)
    def board_ok(self, board: str) -> None:
        self.rt.owner.call(self._board_ok, board)

    def _board_ok(self, board: str) -> None:
        rec = self.boards.get(board)
        if rec is None or (rec.failures == 0 and rec.reason is None):
            return
        rec.failures = 0
        rec.reason = None
        self.sync(board)

    def board_failed(self, board: str, exc: InfraError) -> bool:
        """A board fault: count it; quarantine after the policy's limit. True if quarantined."""
        rt = self.rt
        rec, quarantined = rt.owner.call(self._board_failed, board, exc)
        if quarantined:
            message = f"{board} quarantined after {rec.failures} board faults: {rec.reason}"
            rt.kube.event({"apiVersion": "benchfarm.io/v1alpha1", "kind": "Board",
                           "metadata": {"name": board}}, "Warning", "Quarantined", message)
            rt.notify(board_event(EventKind.board_quarantined, board,
                                         _iso(rec.quarantined_since), message))
        return quarantined

    def _board_failed(self, board: str, exc: InfraError) -> tuple[BoardRecord, bool]:
        rec = self.boards[board]
        rec.failures += 1
        rec.reason = fault_words(exc.reason)
        log.warning("board fault %d on %s: %s: %s", rec.failures, board, exc.reason, exc)
        quarantined = rec.failures >= self.rt.policy.quarantineAfterFailures and \
            rec.quarantined_since is None
        if quarantined:
            rec.quarantined_since = time.time()
        self.sync(board)
        return rec, quarantined

    # -- health checks: sessions of their own ------------------------------------------------
    def health_checks(self) -> None:
        """Launch the check of every quarantined board whose cooldown is over, and give up those
        whose session died (called by every scheduling round, on the owner's thread)."""
        self.watch.soon()
        now = time.time()
        rt = self.rt
        due = [b.name for b in self.boards.values()
               if b.quarantined_since is not None and not b.run and not b.held_by_other
               and b.online and b.name not in self.checking
               and now - b.quarantined_since >= rt.policy.quarantineCooldownSeconds]
        for name in due:
            self._launch_check(name)

    def _launch_check(self, name: str) -> None:
        """Check number n+1, on the owner's thread: the board is taken and the check numbered;
        its writes and its launch go to a launch thread (`_start_check`): a lab that
        quarantines many boards at once does not hold up the rounds for their round trips."""
        rec = self.boards[name]
        # numbered before anything is written: from here only this check's verdict counts
        # (a Board event still carrying the previous check's is not this one's)
        check = rec.health_check = rec.health_check + 1
        dt = self.rt.device_types[rec.device_type]
        rec.run = f"(health check {check})"
        self.checking[name] = self.clock()
        self.rt.launches.submit(self._start_check, Launch.health_check(
            name, rec.uid, check, self.rt.namespace, dt.health_check_seconds))

    def _start_check(self, req: Launch) -> None:
        """On a launch thread: the check recorded on the Board first (a restarted operator adopts
        it), then launched like any session; its session reports in `status.healthCheckEnd`."""
        rt, name = self.rt, req.board
        try:
            rt.kube.patch_board_status(name, {"healthCheck": HealthCheck(
                check=req.attempt, startedAt=now_iso()).model_dump(mode="json")})
        except API_FAILURES as exc:  # the API's outage: the next check (a number of its own) is
            #                        tried after the cooldown
            log.warning("could not start the health check of %s: %s", name, exc)
            rt.owner.call(self._not_started, name)
            return
        self.sync(name)
        try:
            handle = rt.launcher.launch(req)
        except LAUNCH_FAILURES as exc:   # no Lease will show: given up after the grace period
            log.error("%s: the launcher could not start it: %s", req.what(), exc)
            handle = f"not started ({exc})"
        log.info("%s: %s", req.what(), handle)

    def _not_started(self, name: str) -> None:
        rec = self.boards[name]
        rec.run, rec.quarantined_since = None, time.time()
        self.checking.pop(name, None)
        self.sync(name)

    def observe_health(self, name: str, status: dict[str, Any]) -> None:
        """A Board's status as the API has it: the verdict of its latest check, if it came."""
        end = written(HealthCheckEnd, status, "healthCheckEnd")
        rec = self.boards.get(name)
        if end is None or rec is None or name not in self.checking or \
                end.check != rec.health_check:
            return
        self.settle(name, end)

    def settle(self, name: str, end: HealthCheckEnd) -> None:
        """Back to service, or quarantined again until the next check after the cooldown."""
        rt = self.rt
        ok = end.verdict == HealthVerdict.passed
        rec = self.boards[name]
        if name not in self.checking or rec.health_check != end.check:   # settled already
            return
        del self.checking[name]
        rec.run = None
        if ok:
            rec.quarantined_since, rec.failures, rec.reason = None, 0, None
        else:
            rec.quarantined_since = time.time()
            rec.reason = f"health check failed: {fault_words(end.reason)}"
        log.info("health check %d of %s: %s %s", end.check, name, end.verdict, end.message)
        self.sync(name)
        verdict = "passed" if ok else fault_words(end.reason)
        message = (f"{name} {'booted to its prompt; back in service' if ok else 'still fails'}"
                   f" (health check {end.check}: {verdict})")
        rt.launches.submit(rt.kube.event, {"apiVersion": "benchfarm.io/v1alpha1", "kind": "Board",
                                           "metadata": {"name": name}},
                           "Normal" if ok else "Warning",
                           "HealthCheckPassed" if ok else "HealthCheckFailed", message)
        if ok:
            rt.notify(board_event(EventKind.board_back, name, _iso(time.time()), message))
        rt.wake()


class CheckWatch:
    """A check whose session holds no live Lease (after a grace period to take it) is dead: its
    verdict is read once more, else the place it may hold is released and the board stays
    quarantined, checked again after the cooldown. The look (an API listing, and a read and a
    release for each dead one) is made on a launch thread, one at a time; what it finds is
    settled on the owner's (`HealthChecks.settle`)."""

    def __init__(self, checks: HealthChecks) -> None:
        self.checks = checks
        self.rt = checks.rt
        self.observer = LeaseObserver(grace=5.0)        # the health checks' Leases
        self.last_watch = 0.0
        self.watching = False               # a look at the Leases is on a launch thread

    def soon(self) -> None:
        """On the owner's thread, every round: a look every WATCH_EVERY while checks run."""
        checks = self.checks
        if not checks.checking or self.watching or checks.clock() - self.last_watch < WATCH_EVERY:
            return
        self.last_watch = now = checks.clock()
        self.watching = True
        self.rt.launches.submit(self._watch, now)

    def _watch(self, now: float) -> None:
        rt = self.rt
        try:
            try:
                leases = list_leases(rt.kube, f"{HEALTH_LEASE_LABEL}=true")
            except API_FAILURES as exc:  # our own view of the API is gone: judge nobody dead
                log.warning("cannot list health checks' Leases (%s); not judging them", exc)
                rt.owner.call(self.observer.forget)
                return
            for name, check in rt.owner.call(self._dead, leases, now):
                self._judge(name, check)
        finally:
            rt.owner.post(self._watched)

    def _watched(self) -> None:
        self.watching = False

    def _dead(self, leases: list[V1Lease], now: float) -> list[tuple[str, int]]:
        """On the owner's thread: the checks whose Lease stood still or never came."""
        self.observer.observe(leases, now=now)
        return [(name, self.checks.boards[name].health_check)
                for name, since in self.checks.checking.items()
                if now - since >= HEALTH_STARTUP_GRACE and not self.observer.alive(
                    f"{self.rt.namespace}/{health_lease_name(name)}", now)]

    def _judge(self, name: str, check: int) -> None:
        """On a launch thread: a dead check's verdict, if it came after all, or its failure."""
        rt = self.rt
        try:
            body = rt.kube.get_cluster("boards", name) or {}
        except API_FAILURES as exc:
            log.warning("cannot read board %s (%s); judging its check later", name, exc)
            return
        end = written(HealthCheckEnd, body.get("status") or {}, "healthCheckEnd")
        if end is not None and end.check == check:
            rt.owner.call(self.checks.settle, name, end)
            return
        board_uid = str((body.get("metadata") or {}).get("uid") or "")
        if board_uid:       # whatever its process still does, it is not left beside the next
            try:
                what = rt.launcher.end(Launch.health_check(name, board_uid, check, rt.namespace,
                                                           0.0))
                log.info("health check %d of %s given up on: %s", check, name, what)
            except LAUNCH_FAILURES as exc:
                log.warning("could not end health check %d of %s: %s", check, name, exc)
        host, user = health_identity(name, check)
        try:
            if rt.coordinator.release(name, holder=f"{host}/{user}"):
                log.info("released %s, left acquired by its health check %d", name, check)
        except InfraError as exc:   # seen as an orphan by a later refresh
            log.warning("could not release %s after its health check: %s", name, exc)
        rt.owner.call(self.checks.settle, name, HealthCheckEnd(
            check=check, verdict=HealthVerdict.failed, reason=LabFault.health_check_lost,
            message="its session died (its Lease stood still, or was never taken)"))
