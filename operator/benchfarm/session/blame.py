"""Who is to blame when a session stops early: the one place that decides.

labgrid's strategy and benchfarm's board code raise what they saw (a shell that stopped
answering, a kernel panic on the console, a boot that never reached its prompt); this module
decides whose fault that was, and `verdict` turns the decision into what the session does next:

- A step of the run's own suites that takes the board down (a kernel panic, `reboot`, a killed
  shell, a console that hangs after the suite started) is not held against the board on the
  tenant's word: the board's own image is booted to its prompt first. If it does not come up, the
  board is charged as for any board fault. If it does, the board is fine and the step is done
  once more on it (a board may hang once); a step that takes the board down a second time is the
  run's doing (`RunCrashedBoard`: a run error, the board is not charged and the run is not moved
  across the lab).
- Deployed software that does not boot (the bootloader had loaded it) is the run's fault if the
  board's own image then boots to its prompt (`SoftwareBootFailed`), else the board's.
- A board fault anywhere else (the boots of the plan, the probes, a board that does not wake from
  the suspend benchfarm itself drives in a low-power suite) is the board's.
- Someone else holding the place is nobody's fault; an outage is waited out before it gets here;
  a lab fault (PDU, exporter, staging) is the lab's; a run error is the tenant's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ..api.outcomes import HandBack, Reason, Underway
from ..core import steps as st
from ..errors import BoardBusy, BoardFault, DeployedBootFailed, InfraError, RunError
from ..lab.session import Cancelled
from .context import RunContext

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


class Blame:
    """Judges a fault during a step, with the one test that separates run from board: does the
    board's own image still boot to its prompt?"""

    def __init__(self, ctx: RunContext, boot_own: Callable[[], Any]) -> None:
        self.ctx, self.boot_own = ctx, boot_own

    def judge(self, step: st.Step, fault: BoardFault) -> BoardFault | None:
        """None when the board is fine after `fault` during `step` (its own image booted to its
        prompt: the board now runs it); otherwise the board fault to hand back."""
        ctx = self.ctx
        if step.kind != st.SUITE or ctx.suites[step.suite_index].suite == LAB_DRIVEN:
            return fault   # boots, probes, a suspend and wake: benchfarm's doing, not the run's
        suite = ctx.suites[step.suite_index].name
        ctx.status.progress(f"suite {suite} took the board down ({fault.reason}); booting the "
                            f"board's own image to see whose fault it was", Underway.running,
                            force=True)
        log.warning("%s/%s: %s during %s; booting %s's own image before blaming the board",
                    ctx.namespace, ctx.name, fault.reason, step.name, ctx.place)
        try:
            self.boot_own()
        except BoardFault as again:
            return BoardFault(f"{fault}; then the board's own image did not boot either: "
                              f"{again}"[:1000], reason=again.reason)
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
        suite = ctx.suites[step.suite_index].name
        message = (f"suite {suite} (step {step.name}) took the board down twice (last: "
                   f"{fault.reason}: {fault}); the board's own image booted to its prompt each "
                   f"time, so the board is not to blame")[:1000]
        ctx.status.event("Warning", Reason.run_crashed_board, message)
        return RunError(message, reason=Reason.run_crashed_board)
