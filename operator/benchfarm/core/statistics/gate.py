"""What a CI pipeline does with a finished run: `benchfarm submit`'s exit code. Pure.

0 measured and nothing regressed; 1 a metric regressed against the baseline (they are named);
2 the lab's fault (a board, the lab's services, the store: retry later); 3 the run's own fault
(its software did not boot, a suite failed, its input was refused). 130 when the person (or the
pipeline) interrupted it and the run was cancelled. Whose fault a failure is comes from the
typed reasons of `api.outcomes` (`blame`), never from a message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from benchfarm.api.outcomes import Blame, Condition, Phase, Reason, Verdict, blame


class Exit(IntEnum):
    ok = 0
    regressed = 1
    lab = 2
    run = 3
    interrupted = 130


@dataclass(frozen=True)
class Decision:
    code: Exit
    why: str
    reason: str = ""                        # the Succeeded condition's reason, when it failed
    regressed: tuple[str, ...] = field(default=())   # the metrics that regressed

    @property
    def blame(self) -> Blame | None:
        return {Exit.lab: Blame.lab, Exit.run: Blame.run}.get(self.code)


def condition(status: Mapping[str, Any], type_: str = Condition.succeeded) -> Mapping[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == type_), {})


def decide(status: Mapping[str, Any], rows: Sequence[Mapping[str, Any]] = (), *,
           baseline: str | None = None, interrupted: bool = False) -> Decision:
    """The exit code of a finished run: its status and its comparison rows (metrics.json's
    `comparison.rows`, each with `key` and `verdict`); `baseline` when one was asked for."""
    done = condition(status)
    reason, message = str(done.get("reason") or ""), str(done.get("message") or "")
    phase = status.get("phase")
    if phase == Phase.cancelled:
        if interrupted:
            return Decision(Exit.interrupted, "cancelled (interrupted)", reason)
        return Decision(Exit.lab, f"cancelled by someone else: {message}", reason)
    if phase == Phase.failed:
        who = blame(reason)
        code = Exit.run if who == Blame.run else Exit.lab
        whose = "the run's fault" if who == Blame.run else "the lab's fault, retry later"
        return Decision(code, f"{reason}: {message} ({whose})", reason)
    if phase != Phase.succeeded or reason != Reason.completed:
        said = reason or "no reason"
        return Decision(Exit.lab, f"the run did not finish (phase {phase}, {said}): {message}",
                        reason)
    bad = tuple(str(r.get("key")) for r in rows if r.get("verdict") == Verdict.regressed)
    if bad:
        return Decision(Exit.regressed, f"{len(bad)} metric(s) regressed against {baseline}: "
                        + ", ".join(bad), reason, bad)
    if baseline and not rows:
        verdict = condition(status, Condition.regressed)
        return Decision(Exit.run, f"no comparison with baseline {baseline}: "
                        f"{verdict.get('message') or 'no metric in common'}", reason)
    against = f" against {baseline} ({len(rows)} compared)" if baseline else ""
    return Decision(Exit.ok, f"measured; nothing regressed{against}", reason)
