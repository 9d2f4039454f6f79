"""A run's session on its board, once it holds the run's Lease: it takes the place (after the
go-ahead, `session.standby`), runs the steps that are left (`session.steps`), powers the board off
and releases the place, and settles the run by the verdict on what happened (`session.blame`):
results built, failed, cancelled or handed back. It checks before every power operation that the
Lease and the place are still its own (`_guard`); a fenced session no longer touches the board.
"""

from __future__ import annotations

import logging
from typing import Any

from benchfarm import cpu
from benchfarm.api.devicetype import DeviceType
from benchfarm.api.labpolicy import LabPolicySpec
from benchfarm.api.outcomes import HandBack, Phase, Reason, RunFailure, Underway
from benchfarm.core import steps as st
from benchfarm.core.conditions import now_iso
from benchfarm.errors import BoardBusy, InfraError, RunError
from benchfarm.kubeapi.client import Kube
from benchfarm.lab.board import SerialLog
from benchfarm.lab.coordinator import Coordinator
from benchfarm.lab.devicetypes import load_device_types
from benchfarm.lab.environment import labgrid_variables
from benchfarm.lab.session import BoardSession, Cancelled
from benchfarm.session import reporting
from benchfarm.session.blame import Settled, Verdict, verdict
from benchfarm.session.context import PEER_TAG, Config, RunContext, iperf3_peer
from benchfarm.session.lifeline import Fenced, Lifeline
from benchfarm.session.parsing import BudgetedParse
from benchfarm.session.standby import Standby
from benchfarm.session.steps import StepRunner
from benchfarm.store.software import SoftwareCache

log = logging.getLogger("benchfarm.session")


class OnBoard:
    """What one session does with its run's board, from the place's acquisition to the end."""

    def __init__(self, config: Config, kube: Kube, coordinator: Coordinator, lifeline: Lifeline,
                 standby: Standby) -> None:
        self.config, self.kube = config, kube
        self.coordinator, self.lifeline = coordinator, lifeline
        self.standby = standby
        self.steps: StepRunner | None = None       # once the board is acquired
        self.policy: LabPolicySpec | None = None   # the LabPolicy, read once

    def stop_board(self) -> None:
        if self.steps is not None and self.steps.session is not None:
            self.steps.session.stop()

    def _lab_policy(self) -> LabPolicySpec:
        """The lab's one LabPolicy (`default`), read here once: never the tenant's word."""
        if self.policy is None:
            body = self.lifeline.wait_out("read the LabPolicy", lambda: self.kube.get_cluster(
                "labpolicies", "default"))
            self.policy = LabPolicySpec(**(body or {}).get("spec") or {})
        return self.policy

    def _device_type(self, name: str) -> DeviceType | None:
        return load_device_types(self.config.device_types).get(name) if name else None

    def _place_type(self, ctx: RunContext) -> tuple[Any, DeviceType | None]:
        places = self.lifeline.wait_out("read the place", self.coordinator.places)
        info = places.get(ctx.place)
        return info, self._device_type(info.tags.get("device_type", "") if info else "")

    def results_only(self, ctx: RunContext, why: str) -> None:
        """Build the results from the checkpoints; the board is not touched (another run may
        hold it by now)."""
        log.info("%s/%s: %s; building the results without the board", ctx.namespace,
                 ctx.name, why)
        _, dtype = self._place_type(ctx)
        if dtype is None:
            ctx.status.finish(Phase.failed, RunFailure.place_missing, f"place {ctx.place} "
                              f"vanished or has an unknown device type; its results cannot be "
                              f"built")
            return
        ctx.status.progress("building the results", "Reporting", force=True)
        self._complete(ctx, dtype)

    def _complete(self, ctx: RunContext, dtype: DeviceType) -> None:
        cpu.lower(cpu.NO_BOARD_WAITS)   # the board is released: the rest waits for no board
        try:
            reporting.complete(ctx, dtype)
        except RunError as err:
            ctx.status.finish(Phase.failed, err.reason, err.message)
        except (Fenced, Cancelled):
            raise
        except Exception as err:  # a bug in reporting must not crash-loop the session
            log.exception("building the results of %s/%s failed", ctx.namespace, ctx.name)
            ctx.status.finish(Phase.failed, RunFailure.internal_error, f"building the results "
                              f"failed: {type(err).__name__}: {str(err)[:300]}")

    def on_board(self, ctx: RunContext, *, started: bool) -> None:
        steps = ctx.plan()
        todo = st.remaining(steps, ctx.done_steps())
        if not todo:
            self._leave_board(ctx)
            self.results_only(ctx, "no step is left")
            return
        try:
            software = StepRunner.fetch_software(ctx, lambda: SoftwareCache(
                self.config.software_cache, ctx.spool.store,
                policy=self._lab_policy().for_namespace(ctx.namespace), namespace=ctx.namespace,
                settings=self.config.settings))
            self.standby.wait(ctx, spec_started=started)
            self.lifeline.wait_out("acquire the place",
                                   lambda: self.coordinator.acquire(ctx.place))
            log.info("%s/%s: place %s acquired", ctx.namespace, ctx.name, ctx.place)
        except BoardBusy as exc:
            ctx.status.hand_back(ctx.attempt, HandBack.busy, exc)
            return
        except RunError as exc:
            ctx.status.finish(Phase.failed, exc.reason, exc.message)
            return
        info, dtype = self._place_type(ctx)
        if info is None or dtype is None:
            self._release(ctx)
            ctx.status.hand_back(ctx.attempt, HandBack.lab_fault, InfraError(
                f"place {ctx.place} vanished or has an unknown device type",
                reason=RunFailure.place_missing))
            return
        resumed = len(todo) < len(steps)
        if resumed:
            log.info("resuming %s/%s at %s; %d of %d step(s) finished before are kept",
                     ctx.namespace, ctx.name, todo[0].name, len(steps) - len(todo), len(steps))
        ctx.status.progress("resuming: power-cycling the board" if resumed else "board acquired",
                            Underway.resuming if resumed else Underway.booting,
                            extra={} if started else {"startTime": now_iso()}, force=resumed)
        runner = self.steps = StepRunner(ctx, dtype)
        runner.software = software
        settings = self.config.settings
        runner.parse = BudgetedParse(settings.parse_cpu_seconds, settings.parse_memory_mib,
                                     stopped=lambda: self.lifeline.fenced.is_set() or
                                     self.lifeline.cancel.is_set())
        runner.max_metrics = self._lab_policy().for_namespace(ctx.namespace).maxMetricsPerRun
        runner.steps_total, runner.steps_done = len(steps), len(steps) - len(todo)
        serial_log = SerialLog(ctx.spool.append_path(ctx.serial_key()))
        environment = {**self.config.environment, **iperf3_peer(info.tags.get(PEER_TAG, "")),
                       "BENCHFARM_RUN": f"{ctx.namespace}/{ctx.name}"}
        runner.session = BoardSession(ctx.place, info.resources, dtype,
                                      self.lifeline.wait_out("connect to the coordinator",
                                                             self.coordinator.session),
                                      deadline=ctx.deadline, serial_log=serial_log,
                                      environment=environment, guard=lambda: self._guard(ctx),
                                      labgrid_variables=labgrid_variables(self.config.settings))
        if self.lifeline.cancel.is_set():
            runner.session.cancelled.set()
        failure: BaseException | None = None
        try:
            runner.run(todo)
        except Fenced:
            raise
        except Exception as exc:  # judged below; a bug must not leave the board on
            failure = exc
            if verdict(exc).settled == Settled.internal:
                log.exception("unexpected error in the session of %s/%s", ctx.namespace,
                              ctx.name)
        finally:
            serial_log.close()
        self.lifeline.check()
        decided = verdict(None if failure is None else failure)
        if self.lifeline.cancel.is_set():   # stop() closed the console: whatever broke, it was us
            decided = Verdict(Settled.cancelled)
        if decided.touches_board:
            self._power_off(runner.session)
            self._release(ctx)
        ctx.spool.put_file(ctx.serial_key())
        self._settle(ctx, dtype, decided)

    def _settle(self, ctx: RunContext, dtype: DeviceType, decided: Verdict) -> None:
        exc = decided.exc
        if decided.settled == Settled.completed:
            ctx.status.progress("board released; building the results", "Reporting",
                                extra={"boardReleased": True}, force=True)
            self._complete(ctx, dtype)
        elif decided.settled == Settled.cancelled:
            if not self.lifeline.deleting.is_set():
                ctx.status.finish(Phase.cancelled, Reason.cancelled, "cancelled by spec.cancel")
        elif decided.settled == Settled.failed:
            assert isinstance(exc, RunError)
            ctx.status.finish(Phase.failed, exc.reason, exc.message,
                              {"boardReleased": True})
        elif decided.settled == Settled.internal:
            ctx.status.finish(Phase.failed, RunFailure.internal_error, f"the session failed "
                              f"unexpectedly: {type(exc).__name__}: {str(exc)[:300]}",
                              {"boardReleased": True})
        else:
            assert decided.hand_back is not None and exc is not None
            ctx.status.hand_back(ctx.attempt, decided.hand_back, exc)

    def _guard(self, ctx: RunContext) -> None:
        """Before every power operation: still our Lease, still our place."""
        self.lifeline.check()
        holder = self.lifeline.wait_out("check the place",
                                        lambda: self.coordinator.holder(ctx.place))
        if holder == self.coordinator.identity:
            return
        if holder is None:  # the coordinator restarted and forgot every lock: take it back
            log.warning("place %s lost its lock (coordinator restart?); acquiring it again",
                        ctx.place)
            self.lifeline.wait_out("re-acquire the place",
                                   lambda: self.coordinator.acquire(ctx.place))
            return
        raise BoardBusy(f"place {ctx.place} is now held by {holder}; not touching it")

    def _leave_board(self, ctx: RunContext) -> None:
        """No step left, but a session of this run may have died before it let go of the
        board: release the place only if this run's identity still holds it (the board is
        powered off by the next boot of whoever gets it; never one another run holds)."""
        holder = self.lifeline.wait_out("check the place",
                                        lambda: self.coordinator.holder(ctx.place))
        if holder == self.coordinator.identity:
            self._release(ctx)

    def _power_off(self, session: BoardSession | None) -> None:
        if session is None or self.lifeline.fenced.is_set():
            return
        session.power_off_and_close(passes=(Fenced,))

    def _release(self, ctx: RunContext) -> None:
        if self.lifeline.fenced.is_set():
            return
        try:
            self.lifeline.wait_out("release the place",
                                   lambda: self.coordinator.release(ctx.place))
        except InfraError as exc:   # the coordinator is away: its lock expires with the session
            log.warning("could not release %s: %s", ctx.place, exc)
