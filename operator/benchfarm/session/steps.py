"""The steps of a session on its board, each checkpointed before the next one starts.

Fetch and verify the software under test (before the board is touched), stage it on the board's
exporter, then the plan's steps (`core.steps`): timed boots, provenance probes, every suite of
every iteration. Each finished step goes to the spool and the store under its name, so a session
that dies and is launched again skips what is there and goes on with the first missing step.
A step that fails on the board is not judged here: `session.blame` decides who is to blame.

A suite step measured outside its envelope (the device type's, tightened by the resolved
suite's: `core.readings.envelope.judge`) is marked invalid with its reasons and measured
again, up to the envelope's `retakes`: each invalid attempt keeps its raw output under a key of
its own and goes to the checkpoint's `retaken` list; the last attempt is the step's record.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from typing import Any

from benchfarm.api.conditions import Envelope, StepConditions
from benchfarm.api.devicetype import DeviceType
from benchfarm.api.labpolicy import NamespacePolicy
from benchfarm.api.outcomes import BoardFaultKind, Measurement, RunFailure, Underway
from benchfarm.api.runs import SuiteSpec
from benchfarm.core import steps as st
from benchfarm.core.policy import budgets
from benchfarm.core.readings.envelope import judge
from benchfarm.core.statistics.repeat import decide
from benchfarm.core.statistics.results import SuiteRecord
from benchfarm.core.statistics.stats import seed_format
from benchfarm.errors import BoardFault, DeployedBootFailed, RunError
from benchfarm.lab.session import BoardSession, BootResult
from benchfarm.session.blame import Blame
from benchfarm.session.context import RunContext
from benchfarm.session.parsing import BudgetedParse
from benchfarm.store.software import Fetched, SoftwareCache

log = logging.getLogger("benchfarm.session")

CONSOLE_RECOVERIES = 2      # power-cycles to get a dropped console back before it is a fault


class StepRunner:
    def __init__(self, ctx: RunContext, dtype: DeviceType) -> None:
        self.ctx, self.dtype = ctx, dtype
        self.session: BoardSession | None = None
        self.software: dict[str, dict[str, Fetched]] = {}   # side -> part -> verified file
        self.variables: dict[str, dict[str, str]] = {}      # side -> bootloader variables
        self.steps_total = self.steps_done = 0
        self.boot_values: list[float] | None = None
        self.blame = Blame(ctx, self.boot_own)
        self.parse: BudgetedParse | None = None     # None: parse here (a test's board session)
        self.max_metrics = NamespacePolicy.model_fields["maxMetricsPerRun"].default
        self.metrics_used: int | None = None      # the attempt's metrics so far (checkpoints)
        self.parsed = 0                           # the last suite's metrics as its parser counted

    # -- before the board ---------------------------------------------------------------------
    @staticmethod
    def fetch_software(ctx: RunContext, cache: Callable[[], SoftwareCache]
                       ) -> dict[str, dict[str, Fetched]]:
        """Every software set of the run, downloaded and verified before the board is touched:
        by side (`st.side_keys`), part -> file. A bad digest or URL is the run's error. `cache`
        is built only for a run that has software (it reads the LabPolicy: a round trip that a
        run without software need not wait for); a side with only `bootArgs` is checked against
        the LabPolicy too (allowSoftware), and has nothing to fetch."""
        out = {}
        built: SoftwareCache | None = None
        for key, label, software in ctx.sides():
            if software is not None:
                if software.parts() != ["bootArgs"]:
                    ctx.status.progress(f"fetching software{f' {label}' if label else ''}",
                                        Underway.booting)
                built = built or cache()
                out[key] = ctx.lifeline.wait_out("fetch the software",
                                                 functools.partial(built.fetch_set, software))
        return out

    # -- on the board -------------------------------------------------------------------------
    def stage(self) -> None:
        """Stage every side's software on the board's exporter: side -> bootloader variables."""
        from benchfarm.lab.deploy import stage, with_modules
        assert self.session is not None
        for key, _, software in self.ctx.sides():
            if software is None:
                continue
            files = {part: f.path for part, f in self.software.get(key, {}).items()}
            if "modules" in files:
                files["initrd"] = with_modules(files["initrd"], files.pop("modules"))
            self.variables[key] = stage(self.session.board.target, files, software.bootArgs)

    def boot(self, side: str) -> BootResult:
        """A power cycle into the side's software (or the board's own)."""
        assert self.session is not None
        self.session.board.strategy.deploy(self.variables.get(side, {}))
        try:
            return self.session.boot()
        except DeployedBootFailed as fault:
            raise self.blame.deployed_boot_failed(fault) from fault

    def boot_own(self) -> BootResult:
        """A power cycle into the board's own image, whatever the run deploys (the console is
        opened afresh: what took the board down may have taken its connection too)."""
        assert self.session is not None
        self.session.board.close()
        self.session.board.strategy.deploy({})
        return self.session.boot()

    def run(self, todo: list[st.Step]) -> None:
        """The steps still to do, each checkpointed; faults go to the blame decision."""
        session = self.session
        assert session is not None
        blame = self.blame
        self.stage()
        if todo and todo[0].kind != st.BOOT:
            self.boot(todo[0].side)   # resuming mid-plan: the board's state is unknown
        recoveries = 0
        for step in todo:
            if self.enough(step):
                break
            try:
                checkpoint = self.run_step(step)
            except BoardFault as exc:
                if session.cancelled.is_set():
                    raise
                if exc.reason == BoardFaultKind.serial_failed and recoveries < CONSOLE_RECOVERIES:
                    recoveries += 1     # the console's connection dropped: not the run's doing
                    log.warning("console lost during %s (%s); power-cycling (%d/%d)", step.name,
                                exc, recoveries, CONSOLE_RECOVERIES)
                    session.board.close()
                    self.boot(step.side)
                    checkpoint = self.run_step(step)
                else:
                    checkpoint = self.second_chance(step, exc, blame)
            self.checkpoint(step, checkpoint)

    def second_chance(self, step: st.Step, fault: BoardFault, blame: Blame) -> dict[str, Any]:
        """A step that took the board down: once the board's own image has booted (the board is
        fine), the step is done once more on it; down a second time, the run is to blame."""
        assert self.session is not None
        board_fault = blame.judge(step, fault)
        if board_fault is not None:
            raise board_fault from fault
        if self.variables.get(step.side):
            self.boot(step.side)      # back into the run's own software for the step
        try:
            return self.run_step(step)
        except BoardFault as again:
            if self.session.cancelled.is_set():
                raise
            board_fault = blame.judge(step, again)
            raise (board_fault or blame.run_crashed(step, again)) from again

    def enough(self, step: st.Step) -> bool:
        """With spec.repeat, before each new iteration: do the checkpoints already say enough?"""
        ctx = self.ctx
        rule = ctx.spec.repeat
        if rule is None or step.kind != st.SUITE or step.suite_index != 0 or step.warmup:
            return False
        from benchfarm.session import results as res
        got = res.Collected()
        for c in self.checkpoints():
            got.add(c)
        measured = step.iteration - 1 - ctx.spec.warmupIterations
        verdict = decide(res.headline_values(got.records, ctx.suites), rule.relativeCI95,
                         measured, rule.minIterations, rule.maxIterations)
        if verdict is not None:
            log.info("%s/%s: %s after %d iteration(s); not starting iteration %d",
                     ctx.namespace, ctx.name, verdict, measured, step.iteration)
        return verdict is not None

    def run_step(self, step: st.Step) -> dict[str, Any]:
        ctx, session = self.ctx, self.session
        assert session is not None
        label = f"step {self.steps_done + 1}/{self.steps_total}: {step.name}"
        if step.kind == st.BOOT:
            ctx.status.progress(f"boot {step.cycle}/{ctx.spec.bootCycles}" if not step.side else
                                f"boot into {step.side.upper()}, iteration {step.cycle}",
                                Underway.booting)
            boot = self.boot(step.side)
            if boot.failed_attempts:
                ctx.status.event("Warning", "BootRetried",
                                 f"{session.place}: boot {step.cycle} took "
                                 f"{len(boot.failed_attempts) + 1} power cycles; the failed: "
                                 f"{'; '.join(boot.failed_attempts)}"[:1000])
            return {"kind": st.BOOT, "cycle": step.cycle, "side": step.side,
                    "phases": boot.phases, "events": boot.events,
                    "powerOnWall": boot.power_on_wall, "kernelClock": boot.kernel_clock,
                    **({"failedAttempts": boot.failed_attempts} if boot.failed_attempts else {})}
        if step.kind == st.PROVENANCE:
            return {"kind": st.PROVENANCE, "side": step.side,
                    "provenance": {**session.provenance(ctx.suites),
                                   **self.software_provenance(step.side)}}
        spec = ctx.suites[step.suite_index]
        ctx.status.progress(f"iteration {step.iteration}/"
                            f"{ctx.spec.warmupIterations + ctx.iterations()}"
                            f"{' (warm-up)' if step.warmup else ''}, suite {spec.name} ({label})",
                            Underway.running)
        if self.metrics_used is None:    # resumed: what the attempt's earlier steps yielded
            self.metrics_used = sum(len(c["record"]["metrics"]) for c in self.checkpoints()
                                    if c["kind"] == st.SUITE)
        envelope = (self.dtype.envelope or Envelope()).tightened(spec.envelope)
        retaken: list[dict[str, Any]] = []
        while True:
            record, evidence = self.attempt(step, spec, envelope, len(retaken))
            reasons = [] if record.conditions is None or self.dtype.conditions is None else \
                judge(envelope, StepConditions.model_validate(record.conditions))
            if record.conditions is not None:
                record.conditions.update(valid=not reasons, invalid=reasons)
            if not reasons or not record.ok or step.warmup or len(retaken) >= (
                    envelope.retakes or 0):
                break
            retaken.append(record.as_dict())
            ctx.status.event("Warning", Measurement.retaken,
                             f"{spec.name}, iteration {step.iteration}: measured outside the "
                             f"envelope ({'; '.join(reasons)}); measuring it again (retake "
                             f"{len(retaken)} of {envelope.retakes})"[:1000])
        problem = budgets.over_budget(spec.name, record.metrics, count=max(
            self.parsed, len(record.metrics)), used=self.metrics_used, cap=self.max_metrics)
        if problem is not None:
            raise RunError(problem, reason=RunFailure.too_many_metrics)
        self.metrics_used += len(record.metrics)
        return {"kind": st.SUITE, "side": step.side, "record": record.as_dict(),
                "evidence": evidence, "retaken": retaken}

    def attempt(self, step: st.Step, spec: SuiteSpec, envelope: Envelope, retake: int
                ) -> tuple[SuiteRecord, dict[str, Any]]:
        """One measurement of a suite step, its raw output in the spool under its own key."""
        ctx, session = self.ctx, self.session
        assert session is not None and self.metrics_used is not None
        limit = max(0, self.max_metrics - self.metrics_used)
        if self.parse is None:
            record, output, evidence = session.suite(spec, step.iteration, step.warmup,
                                                     envelope=envelope, retake=retake)
            self.parsed = len(record.metrics)
        else:
            record, output, evidence = session.suite(spec, step.iteration, step.warmup,
                                                     functools.partial(self.parse, limit=limit),
                                                     envelope=envelope, retake=retake)
            self.parsed = self.parse.count if record.metrics else 0
        key = st.raw_key(ctx.prefix, spec.name, step.iteration, step.side, retake)
        record.artifact = ctx.spool.put(key, output.encode(), "text/plain")
        return record, evidence

    def software_provenance(self, side: str) -> dict[str, Any]:
        label, software = next((lbl, sw) for key, lbl, sw in self.ctx.sides() if key == side)
        if software is None:
            return {}
        files = {part: f.provenance() for part, f in self.software.get(side, {}).items()}
        return {"software": {"name": label, **files,
                             **({"bootArgs": software.bootArgs} if software.bootArgs else {})}}

    def checkpoint(self, step: st.Step, checkpoint: dict[str, Any]) -> None:
        ctx = self.ctx
        key = st.checkpoint_key(ctx.prefix, ctx.attempt, step)
        ctx.spool.put(key, json.dumps(checkpoint).encode(), "application/json")
        self.steps_done += 1
        extra: dict[str, Any] = {"checkpoint": {"attempt": ctx.attempt, "done": self.steps_done,
                                                "total": self.steps_total, "last": step.name}}
        if step.kind == st.BOOT:
            if self.boot_values is None:   # boots checkpointed before a resume count too
                self.boot_values = [c["phases"][self.dtype.boot.headline]
                                    for c in self.checkpoints() if c["kind"] == st.BOOT and
                                    self.dtype.boot.headline in c["phases"]]
            else:
                value = checkpoint["phases"].get(self.dtype.boot.headline)
                if value is not None:
                    self.boot_values.append(value)
            if self.boot_values:
                extra["bootSeconds"] = seed_format(self.boot_values)
        ctx.status.progress(f"{step.name} done",
                            Underway.booting if step.kind == st.BOOT else Underway.running, extra=extra)

    def checkpoints(self) -> list[dict[str, Any]]:
        return read_checkpoints(self.ctx)


def read_checkpoints(ctx: RunContext) -> list[dict[str, Any]]:
    """This attempt's checkpoints, in the plan's order."""
    names = ctx.done_steps()
    return [json.loads(ctx.lifeline.wait_out("read a checkpoint", functools.partial(
        ctx.spool.get, st.checkpoint_key(ctx.prefix, ctx.attempt, s))))
        for s in ctx.plan() if s.name in names]
