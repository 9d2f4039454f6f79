"""A bisection's record as `git bisect log` writes it, so `git bisect replay` takes it up.

The good and the bad build are marked first (the bisection's own claim, as a person starts
`git bisect`), then each step in the order it was measured, its figures in the comment above its
command: `# good: [REV] LABEL ...` then `git bisect good REV`. An unclear step is a
`git bisect skip` to git (it has no word for "an effect smaller than the threshold"); a bad end
that measured good is a comment only, since git would read a second verdict on it as a
contradiction. The last lines say what the search found in git's words (`# first bad commit:`,
`# possible first bad commit:`), or that it found no change.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from benchfarm.api.outcomes import BisectionAnswer, StepVerdict
from benchfarm.core.bisection.search import Answer

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Build:
    revision: str            # what git calls it (a commit id), or the build's name
    label: str = ""          # a person's words for it (a commit's subject, a software name)

    def __post_init__(self) -> None:
        if not self.revision or any(c.isspace() for c in self.revision) or _CONTROL.search(
                self.revision):
            raise ValueError(f"a build's revision is one word, not {self.revision!r}")

    def named(self) -> str:
        """`[REV] LABEL`, as git names a commit in its comments (a label is one line)."""
        return f"[{self.revision}] {_CONTROL.sub(' ', self.label)}".rstrip()


@dataclass(frozen=True)
class Step:
    build: int               # 0..n-1: the builds after the good one
    verdict: StepVerdict
    detail: str = ""         # its figures: "+5.2 % (95 % CI ...), 4 pairs"


def render(good: Build, builds: Sequence[Build], steps: Sequence[Step],
           found: Answer | None) -> str:
    """The whole record; `found` None while the search goes on."""
    bad = builds[-1]
    lines = ["git bisect start", f"# bad: {bad.named()}", f"git bisect bad {bad.revision}",
             f"# good: {good.named()}", f"git bisect good {good.revision}"]
    for step in steps:
        build = builds[step.build]
        detail = f" — {_CONTROL.sub(' ', step.detail)}" if step.detail else ""
        lines.append(f"# {step.verdict.value}: {build.named()}{detail}")
        if step.build == len(builds) - 1 and step.verdict != StepVerdict.bad:
            lines.append("# (the bad end did not measure bad: no command, git would refuse it)")
        else:
            command = StepVerdict.skip if step.verdict == StepVerdict.unclear else step.verdict
            lines.append(f"git bisect {command.value} {build.revision}")    # git's own words
    if found is None:
        return "\n".join(lines) + "\n"
    if found.kind == BisectionAnswer.culprit:
        lines.append(f"# first bad commit: {builds[found.suspects[0]].named()}")
    elif found.kind == BisectionAnswer.range:
        lines.append("# only skipped commits left to test")
        lines += [f"# possible first bad commit: {builds[i].named()}" for i in found.suspects]
    elif found.kind == BisectionAnswer.no_change:
        lines.append(f"# no change in the range: every build up to {bad.named()} measured good")
    else:
        lines.append("# inconclusive: no build measured bad; of those skipped or unclear, any "
                     "may hold a change:")
        lines += [f"# possible first bad commit: {builds[i].named()}" for i in found.suspects]
    return "\n".join(lines) + "\n"
