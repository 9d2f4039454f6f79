"""Admission beyond what the schema and CEL can say: plan exists, policy, capabilities, limits.

A run that fails here gets `Succeeded=False` with a reason and a message, at once, and is never
queued; nothing here may take long or run user input (user regexes are compiled by RE2, linear).

What admission needs of the operator is `AdmissionRuntime` (the policy, the API, the store's
bucket, the internal ranges, the device types, the signing key, the inventory's device types a
selector matches, a wake-up): it never imports the runtime. Its two moves, `admit` (to Pending)
and `refuse` (to Failed), are made only on a run with no phase yet (`core.scheduling.lifecycle`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from benchfarm.api.outcomes import Phase, RunFailure, Underway
from benchfarm.api.runs import (
    GPU_SUITES,
    BenchmarkRunSpec,
    BenchmarkRunStatus,
    SuiteSpec,
    TestPlanSpec,
    needs_gpu,
)
from benchfarm.core.policy import trust
from benchfarm.core.policy.software import SoftwareReach
from benchfarm.core.scheduling import queue as q, transitions
from benchfarm.core.steps import safe_name
from benchfarm.errors import RunError
from benchfarm.operator.boards.inventory import Inventory
from benchfarm.operator.state.records import Registry, RunState
from benchfarm.store.artifacts import run_prefix
from benchfarm.suites.registry import check_parameters

if TYPE_CHECKING:
    from benchfarm.api.devicetype import DeviceType
    from benchfarm.store.artifacts import ArtifactStore

MAX_INLINE_BYTES = 64 * 1024   # commands, backgrounds and parameters of inline suites together


class AdmissionRuntime(Registry, Protocol):
    """What admission needs of the operator's registry (`operator.runtime.Runtime` is one), the
    base of the room's Protocol (`operator.runs.writes.RunsRuntime`)."""

    @property
    def store(self) -> ArtifactStore: ...

    @property
    def internal(self) -> tuple[Any, ...]: ...

    @property
    def device_types(self) -> Mapping[str, DeviceType]: ...

    @property
    def inventory_known(self) -> bool: ...

    @property
    def inventory(self) -> Inventory: ...      # the device types a selector matches


def selector(spec: BenchmarkRunSpec) -> q.Selector:
    """The boards a run may take, as the queue matches them."""
    return q.Selector.of(spec.selector.deviceType, spec.selector.labels, spec.selector.board)


def queue_entry(r: RunState, ceiling: int) -> q.QueueEntry:
    """The run as the scheduler sees it (`ceiling`: its namespace's highest priority), rebuilt
    only when what it is made of changes (built when the run is observed, so a flood of new runs
    costs the rounds nothing)."""
    head = r.head
    avoid = head.avoidBoards + r.avoid_boards
    fingerprint = (r.generation, ceiling, avoid, head.suites, head.gpu)
    if r.queue_entry is None or r.queue_entry[0] != fingerprint:
        entry = q.QueueEntry(r.key, r.namespace, min(r.spec.priority, ceiling), r.created,
                             selector(r.spec), frozenset(avoid), needs_gpu=head.gpu)
        r.queue_entry = (fingerprint, entry)
    entry_now: q.QueueEntry = r.queue_entry[1]
    return entry_now


def resolve_suites(rt: AdmissionRuntime, namespace: str, spec: BenchmarkRunSpec) -> list[SuiteSpec]:
    policy = rt.policy.for_namespace(namespace)
    if spec.priority > policy.maxPriority:
        raise RunError(f"priority {spec.priority} is above the highest this namespace may use "
                       f"({policy.maxPriority})", reason=RunFailure.policy_violation)
    if spec.timeoutSeconds > policy.maxTimeoutSeconds:
        raise RunError(f"timeoutSeconds {spec.timeoutSeconds} is above the longest this namespace "
                       f"may use ({policy.maxTimeoutSeconds}, LabPolicy maxTimeoutSeconds)",
                       reason=RunFailure.policy_violation)
    if spec.suites is not None:
        if not policy.allowInlineSuites:
            raise RunError("inline suites are not allowed in this namespace (they run arbitrary "
                           "commands on shared boards); use a TestPlan",
                           reason=RunFailure.policy_violation)
        size = sum(len(s.command) + len(s.background or "") +
                   sum(len(k) + len(v) for k, v in s.parameters.items()) for s in spec.suites)
        if size > MAX_INLINE_BYTES:
            raise RunError(f"inline suites are {size} bytes; at most {MAX_INLINE_BYTES} are "
                           "accepted (put large plans in a TestPlan)",
                           reason=RunFailure.spec_too_large)
        suites = list(spec.suites)
    else:
        # read, not taken from a watch: a plan edited just before the run was created is the
        # one it runs (two watch streams do not keep the order of the writes)
        plan = rt.kube.get_cluster("testplans", spec.plan or "")
        if plan is None:
            raise RunError(f"TestPlan {spec.plan!r} not found", reason=RunFailure.plan_not_found)
        try:
            # the plan's envelope goes into every suite (tightened by the suite's own): the
            # resolved suites are signed, so the session trusts what they say a result needs
            suites = TestPlanSpec(**(plan.get("spec") or {})).resolved()
        except ValidationError as exc:
            raise RunError(f"TestPlan {spec.plan!r} is invalid: {exc}",
                           reason=RunFailure.invalid_plan) from exc
    names = [s.name for s in suites]
    if len(set(names)) != len(names):
        raise RunError("suite names in a plan must be unique", reason=RunFailure.invalid_plan)
    for s in suites:
        if not safe_name(s.name):
            raise RunError(f"suite name {s.name!r} is not allowed: letters, digits, '.', '_' and "
                           "'-' only (it becomes part of artifact names)",
                           reason=RunFailure.invalid_plan)
        problem = check_parameters(s.suite, dict(s.parameters))
        if problem:
            raise RunError(f"suite {s.name}: {problem}", reason=RunFailure.invalid_plan)
    return suites


def check_software_reach(rt: AdmissionRuntime, namespace: str, spec: BenchmarkRunSpec) -> None:
    """Refuse software the namespace may not boot or URLs it may not have the lab fetch (the
    session checks again before it downloads anything)."""
    reach = SoftwareReach(rt.policy.for_namespace(namespace), namespace, rt.store.config.bucket,
                          rt.internal)
    for _, software in spec.software_sets():
        problem = reach.software_problem(software)
        if problem:
            raise RunError(problem.message, reason=problem.reason)


def check_software(spec: BenchmarkRunSpec, known: list[Any]) -> None:
    """Refuse software no matching board can boot (a device type lists the parts it deploys)."""
    sides = [s for _, s in spec.software_sets() if s is not None]
    if not sides:
        return
    labels = [label for label, _ in spec.software_sets()]
    if len(set(labels)) != len(labels):
        raise RunError(f"software and softwareB need different names (both are {labels[0]!r})",
                       reason=RunFailure.invalid_software)
    wanted = sorted({p for s in sides for p in s.parts()})
    if known and not any(set(wanted) <= set(dt.deploy) for dt in known):
        can = "; ".join(f"{dt.name} deploys {', '.join(dt.deploy) or 'nothing'}" for dt in known)
        raise RunError(f"no matching board can boot the software this run deploys "
                       f"({', '.join(wanted)}): {can}", reason=RunFailure.software_unsupported)


def check_capabilities(rt: AdmissionRuntime, suites: list[SuiteSpec], device_types: set[str],
                       spec: BenchmarkRunSpec | None = None) -> None:
    """Refuse a plan no matching board can run: a GPU, low-power modes, programs, software."""
    kinds = [rt.device_types.get(n) for n in sorted(device_types)]
    known = [dt for dt in kinds if dt is not None]
    if spec is not None:
        check_software(spec, known)
    if needs_gpu(suites) and known and not any(dt.gpu for dt in known):
        raise RunError(f"this plan runs GPU suites ({', '.join(s.name for s in suites if s.suite in GPU_SUITES)}) "
                       f"but no matching board has a GPU ({', '.join(dt.name for dt in known)})",
                       reason=RunFailure.no_gpu)
    for s in suites:
        if s.suite == "low-power":
            mode = s.parameters.get("mode", "")
            if known and not any(dt.mode(mode) and dt.rails for dt in known):
                raise RunError(f"suite {s.name}: no matching board has low-power mode "
                               f"{mode!r} and rail monitoring", reason=RunFailure.no_low_power_mode)
    problems = []
    for dt in kinds:
        if dt is None or dt.programs is None:
            return  # a matching board of unknown contents may have them
        missing = sorted({p for s in suites for p in s.requires} - set(dt.programs))
        if not missing:
            return
        problems.append(f"{dt.name} lacks {', '.join(missing)}")
    if problems:
        raise RunError("no matching board has the programs this plan needs: "
                       + "; ".join(problems), reason=RunFailure.missing_programs)


def admit(rt: AdmissionRuntime, body: dict[str, Any]) -> None:
    """Validate what the schema cannot and queue the run (or fail it with a reason)."""
    meta = body["metadata"]
    ns, name, gen = meta["namespace"], meta["name"], meta.get("generation")
    status = body.get("status") or {}       # its transitions' input (`core.scheduling.transitions`)
    if BenchmarkRunStatus.of(status).phase:
        return  # admitted before (operator restart)
    try:
        spec = BenchmarkRunSpec(**body["spec"])
        suites = resolve_suites(rt, ns, spec)
        check_software_reach(rt, ns, spec)
        try:
            prefix = run_prefix(ns, name, meta["uid"], spec.artifactPrefix)
        except ValueError as exc:
            raise RunError(str(exc), reason=RunFailure.invalid_artifact_prefix) from exc
        if rt.inventory_known:
            kinds = rt.inventory.kinds_matching(selector(spec))
            if not kinds:
                raise RunError(f"no board in the lab matches the selector "
                               f"{spec.selector.model_dump(exclude_none=True)}",
                               reason=RunFailure.no_matching_board)
            check_capabilities(rt, suites, set(kinds), spec)
    except RunError as exc:
        rt.kube.patch_run_status(ns, name, transitions.finished(status, gen, Phase.failed,
                                                                exc.reason, exc.message))
        rt.kube.event(body, "Warning", exc.reason, exc.message)
        return
    resolved = [s.model_dump(exclude_none=True) for s in suites]
    rt.kube.patch_run_status(ns, name, transitions.admitted(
        status, gen, plan_digest=trust.plan_digest(suites), resolved=resolved,
        signature=trust.sign(rt.signing_key, meta["uid"], resolved), prefix=prefix))
    rt.kube.event(body, "Normal", Underway.queued, "run admitted and queued")
    rt.wake()
