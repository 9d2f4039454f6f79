"""Who is to blame when a session stops early: the one place that decides.

labgrid's strategy and benchfarm's board code raise what they saw (a shell that stopped
answering, a kernel panic on the console, a boot that never reached its prompt); this module
decides whose fault that was, and `verdict` turns the decision into what the session does next.
What a board printed is no evidence against it while the tenant's own code runs there: a tenant
kernel or initramfs can print any panic marker, and so can a suite. The evidence is the board's
own image (its health check, as `session.health` does it: boot it to its prompt):

- A fault while the tenant's code runs on the board (`tenant_may_have_done`: a step of its own
  suites; any step on its own software, the provenance probe of its kernel or initramfs
  included; a step of the lab's on the board's own image after one of its suites ran there
  since the last boot) is not held against the board: the board's own image is booted to its
  prompt first. If it does not come up, the board is charged as for any board fault. If it
  does, the board is fine and the step is done once more (on the run's software again, if it
  has some: a board may hang once); a step that takes the board down a second time is the
  run's doing (`RunCrashedBoard`: a run error, the board is not charged and the run is not moved
  across the lab, so it consumes none of its retries on other boards).
- Deployed software that does not boot (the bootloader had loaded it) is the run's fault if the
  board's own image then boots to its prompt (`SoftwareBootFailed`), else the board's.
- A board fault anywhere else (the boots of the board's own image, its provenance probe before
  any suite ran, a lab step redone right after the board's own image booted again) is the
  board's: its own software failed on it.
- Someone else holding the place is nobody's fault; an outage is waited out before it gets here;
  a lab fault (PDU, exporter, staging) is the lab's; a run error is the tenant's.

What the board printed stays in the run's own status and events; what a Board says to every
namespace about a fault is the lab's own words for its kind (`api.outcomes.BoardFaultKind`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from benchfarm.api.outcomes import HandBack, Reason, Underway
from benchfarm.core import steps as st
from benchfarm.errors import BoardBusy, BoardFault, DeployedBootFailed, InfraError, RunError
from benchfarm.lab.session import Cancelled
from benchfarm.session.context import RunContext

log = logging.getLogger("benchfarm.session")
LAB_DRIVEN = "low-power"   # a suite that runs no command of the tenant's (benchfarm suspends)


class Settled(Enum):
    """What a session does once its steps stopped."""

    completed = "completed"        # every step done: build the results
    cancelled = "cancelled"        # spec.cancel or a delete: stop, keep the record
    failed = "failed"              # the run's fault: fail it, never retry
    internal = "internal"          # a bug of ours: fail it, say so
    handed_back = "handed_back"    # the operator decides (charge, move, requeue)


@dataclass(frozen=True)
class Verdict:
    settled: Settled
    exc: BaseException | None = None
    hand_back: HandBack | None = None

    @property
    def touches_board(self) -> bool:
        """Power off and release at the end: not when the place is someone else's now."""
        return self.hand_back != HandBack.busy


def verdict(exc: BaseException | None) -> Verdict:
    """The decision for how the steps ended (None: they all ran)."""
    if exc is None:
        return Verdict(Settled.completed)
    if isinstance(exc, Cancelled):
        return Verdict(Settled.cancelled, exc)
    if isinstance(exc, BoardFault):
        return Verdict(Settled.handed_back, exc, HandBack.board_fault)
    if isinstance(exc, BoardBusy):
        return Verdict(Settled.handed_back, exc, HandBack.busy)
    if isinstance(exc, RunError):
        return Verdict(Settled.failed, exc)
    if isinstance(exc, InfraError):
        return Verdict(Settled.handed_back, exc, HandBack.lab_fault)
    return Verdict(Settled.internal, exc)


def tenant_may_have_done(step: st.Step, plan: Sequence[st.Step], tenant_sides: Collection[str],
                         lab_driven: Collection[int], *, own_image_booted: bool = False) -> bool:
    """Whether a board fault during `step` may be the doing of the run's own code, so that only
    the board's own image failing afterwards is evidence against the board.

    `tenant_sides`: the sides whose software is the run's (a kernel, an initramfs, a command
    line); `lab_driven`: the indexes of the suites that run no command of the tenant's;
    `own_image_booted`: the board's own image was booted to its prompt since the fault before
    (the step is being redone on it). A boot's own failures are judged by what the bootloader
    had loaded (`DeployedBootFailed`), not here."""
    if step.kind == st.BOOT:
        return False
    if step.side in tenant_sides:
        return True      # its kernel or initramfs runs: whatever the console says is its doing
    if step.kind == st.SUITE and step.suite_index not in lab_driven:
        return True      # its own commands
    if own_image_booted:
        return False     # the lab's step, right after a fresh boot of the board's own image
    # a lab step on the board's own image: any suite of the tenant's that ran on this boot may
    # have left something behind (a process that prints a panic marker later, a setting)
    for before in reversed(plan[:plan.index(step)] if step in plan else []):
        if before.kind == st.BOOT:
            return False
        if before.kind == st.SUITE and before.suite_index not in lab_driven:
            return True
    return False


def what_ran(step: st.Step, suites: Sequence[str], software: str) -> str:
    """The step, as a person reads it in the run's status: whose code ran when it failed."""
    on = f" on the run's software {software}" if software else ""
    if step.kind == st.PROVENANCE:
        return f"the provenance probe (step {step.name}){on}"
    if step.kind == st.SUITE and step.suite_index < len(suites):
        return f"suite {suites[step.suite_index]} (step {step.name}){on}"
    return f"step {step.name}{on}"


class Blame:
    """Judges a fault during a step, with the one test that separates run from board: does the
    board's own image still boot to its prompt?"""

    def __init__(self, ctx: RunContext, boot_own: Callable[[], Any]) -> None:
        self.ctx, self.boot_own = ctx, boot_own
        self.checked: set[str] = set()   # steps after whose fault the own image booted fine

    def _tenant_sides(self) -> set[str]:
        return {key for key, _, software in self.ctx.sides() if software is not None}

    def _software(self, side: str) -> str:
        return next((label for key, label, software in self.ctx.sides()
                     if key == side and software is not None), "")

    def _what(self, step: st.Step) -> str:
        return what_ran(step, [s.name for s in self.ctx.suites], self._software(step.side))

    def judge(self, step: st.Step, fault: BoardFault) -> BoardFault | None:
        """None when the board is fine after `fault` during `step` (its own image booted to its
        prompt: the board now runs it); otherwise the board fault to hand back."""
        ctx = self.ctx
        lab_driven = {i for i, s in enumerate(ctx.suites) if s.suite == LAB_DRIVEN}
        if not tenant_may_have_done(step, ctx.plan(), self._tenant_sides(), lab_driven,
                                    own_image_booted=step.name in self.checked):
            return fault   # the board's own image failed under the lab's own step
        what = self._what(step)
        ctx.status.progress(f"{what} took the board down ({fault.reason}); health check: "
                            f"booting the board's own image to see whose fault it was",
                            Underway.running, force=True)
        log.warning("%s/%s: %s during %s; booting %s's own image before blaming the board",
                    ctx.namespace, ctx.name, fault.reason, step.name, ctx.place)
        try:
            self.boot_own()
        except BoardFault as again:
            return BoardFault(f"{fault}; then the board's own image did not boot either: "
                              f"{again}"[:1000], reason=again.reason)
        self.checked.add(step.name)
        return None

    def deployed_boot_failed(self, fault: DeployedBootFailed) -> Exception:
        """The run's own software did not boot: its fault if the board's own image does."""
        ctx = self.ctx
        ctx.status.progress(f"the deployed software did not boot ({fault.reason}); booting the "
                            f"board's own image to see whose fault it was", Underway.booting, force=True)
        try:
            self.boot_own()
        except BoardFault as again:
            return BoardFault(f"{fault}; then the board's own image did not boot either: "
                              f"{again}"[:1000], reason=again.reason)
        return RunError(f"{fault}; the board's own image then booted to its prompt, so the "
                        f"deployed software is to blame"[:1000], reason=Reason.software_boot_failed)

    def run_crashed(self, step: st.Step, fault: BoardFault) -> RunError:
        """The step took a healthy board down twice: the run's doing."""
        ctx = self.ctx
        message = (f"{self._what(step)} took the board down twice (last: {fault.reason}: "
                   f"{fault}); the board's own image booted to its prompt each time, so the "
                   f"board is not to blame")[:1000]
        ctx.status.event("Warning", Reason.run_crashed_board, message)
        return RunError(message, reason=Reason.run_crashed_board)
