"""The steps of a board session, in order, each with a name that is also its checkpoint key.

A session is a fixed list: the timed boots, the provenance probes, then every suite of the plan in
every iteration. An A/B run (two software sets, sides `a` and `b`) alternates the sides on one
board: each iteration boots side a (a timed boot), runs every suite, then does the same for side b,
so slow drift of the board or the room falls on both sides alike; each side's provenance is
probed after its first boot. Each finished step is checkpointed under its name; a session that restarts skips
the names already checkpointed and goes on with the first one missing. Pure: no I/O.

Checkpoints live per attempt (one attempt = one board): results from two boards are never mixed,
so a run moved to another board after a board fault measures everything again there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

BOOT, PROVENANCE, SUITE = "boot", "provenance", "suite"

# Suite step names become parts of S3 keys and file names: keep them to a safe alphabet.
SAFE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
_SAFE = re.compile(SAFE_NAME)


@dataclass(frozen=True)
class Step:
    kind: str
    name: str                  # unique in the session; the checkpoint's file name
    cycle: int = 0             # boots: 1-based
    iteration: int = 0         # suites: 1-based, warm-ups included
    warmup: bool = False
    suite_index: int = 0       # suites: index into the plan's suites
    side: str = ""             # A/B runs: "a" or "b", the software set the board runs

    @property
    def label(self) -> str:
        return self.name


def safe_name(name: str) -> bool:
    return bool(_SAFE.match(name)) and ".." not in name


def side_keys(sides: int) -> list[str]:
    """The sides' keys: "" for a run of one software set (or none), "a" and "b" for A/B."""
    return [""] if sides < 2 else ["a", "b"]


def plan_steps(boot_cycles: int, suite_names: list[str], iterations: int,
               warmup_iterations: int, sides: int = 1) -> list[Step]:
    if sides >= 2:
        return _ab_steps(suite_names, iterations, warmup_iterations)
    steps = [Step(BOOT, f"boot-{c:03d}", cycle=c) for c in range(1, boot_cycles + 1)]
    steps.append(Step(PROVENANCE, PROVENANCE))
    total = warmup_iterations + iterations
    for it in range(1, total + 1):
        for index, name in enumerate(suite_names):
            steps.append(Step(SUITE, f"it-{it:03d}-{name}", iteration=it,
                              warmup=it <= warmup_iterations, suite_index=index))
    return steps


def _ab_steps(suite_names: list[str], iterations: int, warmup_iterations: int) -> list[Step]:
    steps = []
    for it in range(1, warmup_iterations + iterations + 1):
        warmup = it <= warmup_iterations
        for side in side_keys(2):
            steps.append(Step(BOOT, f"it-{it:03d}-{side}-boot", cycle=it, side=side))
            if it == 1:
                steps.append(Step(PROVENANCE, f"{PROVENANCE}-{side}", side=side))
            for index, name in enumerate(suite_names):
                steps.append(Step(SUITE, f"it-{it:03d}-{side}-{name}", iteration=it,
                                  warmup=warmup, suite_index=index, side=side))
    return steps


def checkpoint_prefix(run_prefix: str, attempt: int) -> str:
    return f"{run_prefix}/checkpoints/attempt-{attempt:03d}/"


def checkpoint_key(run_prefix: str, attempt: int, step: Step) -> str:
    return f"{checkpoint_prefix(run_prefix, attempt)}{step.name}.json"


def raw_key(run_prefix: str, step_name: str, iteration: int, side: str = "",
            retake: int = 0) -> str:
    """Where a suite step's output goes; a retake of an iteration measured outside its
    envelope (its n-th measurement again) has a key of its own, the first keeps the plain one."""
    return (f"{run_prefix}/raw/{step_name}/{f'{side}/' if side else ''}iteration-{iteration:03d}"
            f"{f'-retake-{retake}' if retake else ''}.txt")


def remaining(steps: list[Step], done: Iterable[str]) -> list[Step]:
    """The steps still to run, in order. A finished step is never run again."""
    finished = set(done)
    return [s for s in steps if s.name not in finished]


def done_names(keys: Iterable[str], prefix: str) -> set[str]:
    """Step names from the checkpoint keys found under `prefix`."""
    return {k[len(prefix):-len(".json")] for k in keys
            if k.startswith(prefix) and k.endswith(".json")}
