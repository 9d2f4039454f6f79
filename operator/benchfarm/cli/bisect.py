"""`benchfarm bisect log NAMESPACE/NAME`: a BenchmarkBisection's record as `git bisect log`
writes it (`core.bisection.log`), from the bisection's spec and status; `git bisect replay`
takes it up where the builds are commits of a repository (their names its revisions).

The steps' verdicts are read from the status and the answer is the search's own over them
(`core.bisection.search.answer`), so the record says what the operator decided. Any cluster: a
kubeconfig. Exit codes: 0 printed (the search may still go on: the record so far), 1 no such
bisection or the API unreachable.
"""

from __future__ import annotations

import sys
from typing import Any

from pydantic import ValidationError

from benchfarm.api.bisections import BenchmarkBisectionSpec, BenchmarkBisectionStatus
from benchfarm.api.runs import SoftwareSet
from benchfarm.core.bisection.judge import percent
from benchfarm.core.bisection.log import Build, Step, render
from benchfarm.core.bisection.search import answer
from benchfarm.errors import BenchfarmError
from benchfarm.settings import Settings


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("bisect", help="a BenchmarkBisection's record (git bisect log)")
    verbs = p.add_subparsers(dest="verb", required=True)
    log = verbs.add_parser("log", help="print the record `git bisect replay` reads")
    log.add_argument("bisection", help="NAMESPACE/NAME (NAME: in the current namespace)")
    log.set_defaults(func=lambda args: main_log(args.settings, args.bisection))


def _label(software: SoftwareSet) -> str:
    """A build's words in the record: what it boots (the kernel's URL, its boot arguments)."""
    parts = [software.kernel.url] if software.kernel is not None else []
    if software.bootArgs:
        parts.append(software.bootArgs)
    return " ".join(parts)


def record(body: dict[str, Any]) -> str:
    """The record of a bisection object (its spec and status)."""
    spec = BenchmarkBisectionSpec(**body.get("spec") or {})
    status = BenchmarkBisectionStatus.of(body.get("status"))
    builds = [Build(b.name, _label(b)) for b in spec.builds]
    steps = []
    for s in status.steps:
        if s.verdict is None or not 0 <= s.build < len(builds):
            continue          # still measuring (or not this spec's build): not a verdict yet
        low, high = (s.ci95 + [None, None])[:2]
        detail = s.message if s.pairs == 0 else (
            f"{percent(s.effect)} worse (95 % CI {percent(low)} to {percent(high)}, {s.pairs} pairs)")
        steps.append(Step(s.build, s.verdict, detail))
    found = answer(len(builds), {s.build: s.verdict for s in steps})
    return render(Build(spec.good_build.name, _label(spec.good_build)), builds, steps, found)


def main_log(settings: Settings, ref: str) -> int:
    from benchfarm.kubeapi.client import Kube
    from benchfarm.kubeapi.kubeconfig import object_ref
    ns, name = object_ref(settings, ref)
    try:
        body = Kube(settings, outage_budget=10).get_custom("benchmarkbisections", ns, name)
    except BenchfarmError as exc:
        print(f"benchfarm bisect log: {exc}", file=sys.stderr)
        return 1
    if body is None:
        print(f"benchfarm bisect log: no BenchmarkBisection {ns}/{name}", file=sys.stderr)
        return 1
    try:
        sys.stdout.write(record(body))
    except (ValidationError, ValueError) as exc:   # an object of another version of benchfarm
        print(f"benchfarm bisect log: {ns}/{name} is no bisection this benchfarm reads: {exc}",
              file=sys.stderr)
        return 1
    return 0
