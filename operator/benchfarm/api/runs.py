"""A BenchmarkRun's shape: what it runs (its suites, inline or a TestPlan's, and adaptive
repetition; the suite names a plan may use), the software it boots (`SoftwareSet`), its spec and
the rules the API server checks of it, and its status as the operator and its session write it
(`BenchmarkRunStatus`, written through `BenchmarkRunStatusPatch`). No I/O.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field

from benchfarm.api.base import PATH_SEGMENT, Condition, Model, Name, ParamValue, Status, immutable
from benchfarm.api.boards import BoardSelector
from benchfarm.api.conditions import Envelope
from benchfarm.api.grants import GoAhead
from benchfarm.api.outcomes import SessionEnd

# The names of the suites benchfarm can parse; plans and the CRD schema accept only these. Kept
# equal to `benchfarm.suites.registry.names()` by a test (api may not import suites).
SUITE_NAMES: list[str] = [
    "7zip", "alsa", "boot-time", "console-timing", "coremark", "coremark-pro", "cyclictest", "dd",
    "dhrystone", "dmatest", "fio", "fps", "glmark2", "hackbench", "iperf3", "linpack", "lmbench",
    "mbw", "multibench", "nbench", "ne10", "netperf", "openssl", "shell", "stream", "stress-ng",
    "sysbench", "whetstone", "low-power",
]
# Suites the board session runs itself (no command output to parse).
SESSION_SUITES: set[str] = {"low-power"}
# Suites that need a GPU on the board.
GPU_SUITES: set[str] = {"glmark2", "fps"}


def needs_gpu(suites: list[Any]) -> bool:
    """Whether one of `suites` (SuiteSpecs, or their dicts as a run's status holds them) needs
    a GPU on its board."""
    return any((s.suite if isinstance(s, SuiteSpec) else
                s.get("suite") if isinstance(s, dict) else None) in GPU_SUITES for s in suites)


class SuiteSpec(Model):
    """One benchmark suite of a plan: the command run on the board and the parser that reads it."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", json_schema_extra={
        "x-kubernetes-validations": [{
            "rule": "self.suite == 'low-power' || size(self.command) > 0",
            "message": "command is required (except for the low-power suite)"}]})

    name: Annotated[str, Field(min_length=1, max_length=63,
                               pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")] = Field(
        description="A name for this step, unique in the plan; letters, digits, '.', '_', '-' "
                    "(it names the step's artifacts in the store).")
    suite: Annotated[str, Field(json_schema_extra={"enum": SUITE_NAMES})] = Field(
        description="Parser that reads the output: " + ", ".join(SUITE_NAMES) + ".")
    command: Annotated[str, Field(max_length=4096)] = Field(
        "", description="Shell command run on the board's console (not used by low-power).")
    timeoutSeconds: int = Field(300, ge=1, le=86400,
                                description="Limit of this step's command on the board, in seconds.")
    parameters: dict[Annotated[str, Field(max_length=63)], ParamValue] = Field(
        default_factory=dict, max_length=32,
        description="Parser parameters (e.g. cpuClockMHz, tool for lmbench).")
    background: Annotated[str, Field(max_length=1024)] | None = Field(
        None, description="Load started before the command and stopped after it.")
    requires: list[Annotated[str, Field(max_length=63)]] = Field(
        default_factory=list, max_length=16, description="Programs the board image must have.")
    envelope: Envelope | None = Field(None, description=(
        "The conditions this step's result is valid under (governor, frequency, temperature, "
        "idle before the start) and how long to wait for them: it tightens the plan's and the "
        "device type's (the stricter of each bound). Resolved at admission."))


class TestPlanSpec(Model):
    __test__ = False  # not a pytest class, despite the name

    description: Annotated[str, Field(max_length=1024)] = Field(
        "", description="What the plan measures, for people (kubectl get testplans shows it).")
    suites: list[SuiteSpec] = Field(min_length=1, max_length=64,
                                    description="The plan's steps, run in order on every iteration.")
    envelope: Envelope | None = Field(None, description=(
        "The conditions every step's result is valid under, tightening the device type's; a "
        "suite's own envelope tightens this one."))

    def resolved(self) -> list[SuiteSpec]:
        """The suites as a run resolves them: each with the plan's envelope tightened by its own
        (the device type's is applied by the session, on the board it got)."""
        return resolve_envelopes(self.suites, self.envelope)


def resolve_envelopes(suites: list[SuiteSpec], plan: Envelope | None) -> list[SuiteSpec]:
    """Each suite with `plan`'s envelope tightened by the suite's own (unchanged without one)."""
    if plan is None:
        return list(suites)
    return [s.model_copy(update={"envelope": plan.tightened(s.envelope)}) for s in suites]


class RepeatSpec(Model):
    """Adaptive repetition: iterate until every headline metric is known well enough."""

    relativeCI95: float = Field(gt=0, le=1, description=(
        "Stop when every headline metric's 95 % confidence interval half-width is within this "
        "fraction of its mean (0.02 = +-2 %)."))
    minIterations: int = Field(3, ge=2, le=1000, description=(
        "Iterate at least this often before the confidence interval is looked at."))
    maxIterations: int = Field(30, ge=2, le=1000, description=(
        "Stop after this many iterations even if the interval is still wider than relativeCI95."))


Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
ArtifactUrl = Annotated[str, Field(max_length=2048, pattern=r"^(s3|https?)://[^\s]+$")]


class Artifact(Model):
    """One file of the software under test, and the digest it must have."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", json_schema_extra={
        "x-kubernetes-validations": [{
            "rule": "has(self.sha256) != has(self.sha256Url)",
            "message": "give exactly one of sha256 (64 hex digits) or sha256Url (a SHA256SUMS "
                       "file published with the artifact)"}]})

    url: ArtifactUrl = Field(description=(
        "s3://BUCKET/KEY in the lab's artifact store, or an http(s):// URL."))
    sha256: Sha256 | None = Field(None, description="The file's SHA-256, lower-case hex.")
    sha256Url: ArtifactUrl | None = Field(None, description=(
        "A sha256sum-format file (s3:// or http(s)://) that lists this file's digest by its "
        "name, as a build publishes it beside its outputs."))


#: The parts of a run's software that are files, an Artifact each (the modules are laid over the
#: initrd as it is staged).
ARTIFACT_PARTS = ("kernel", "initrd", "dtb", "modules")
#: Every part of a SoftwareSet: its files and the kernel command line it adds.
SOFTWARE_PARTS = (*ARTIFACT_PARTS, "bootArgs")


class SoftwareSet(Model):
    """The software a run boots instead of what the board has: staged on the board's exporter
    through labgrid's TFTP provider and loaded by the board's bootloader."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", json_schema_extra={
        "x-kubernetes-validations": [
            {"rule": "has(self.kernel) || has(self.initrd) || has(self.dtb) || "
                     "has(self.bootArgs)",
             "message": "name at least one of kernel, initrd, dtb or bootArgs"},
            {"rule": "!has(self.modules) || has(self.initrd)",
             "message": "modules are laid over the initrd: give an initrd with them"}]})

    name: Annotated[str, Field(max_length=63, pattern=r"^[A-Za-z0-9._-]*$")] = Field(
        "", description="A label for this set in reports (default: A, or B for softwareB).")
    kernel: Artifact | None = Field(None, description="The kernel image (arm64 Image, zImage).")
    initrd: Artifact | None = Field(None, description="An initramfs (cpio, optionally "
                                    "compressed).")
    dtb: Artifact | None = Field(None, description="The device tree blob.")
    modules: Artifact | None = Field(None, description=(
        "A cpio archive of /lib/modules, appended to the initrd (the kernel unpacks "
        "concatenated archives in order)."))
    bootArgs: Annotated[str, Field(max_length=1024, pattern=r"^[A-Za-z0-9 ._,:=/+@-]*$")] | None = Field(
        None, description=("Kernel command line added to the board's own (letters, digits, "
                           "space and . _ , : = / + @ -: it passes through the bootloader's "
                           "shell)."))

    def parts(self) -> list[str]:
        return [p for p in SOFTWARE_PARTS if getattr(self, p) is not None]


ARTIFACT_PREFIX_PATTERN = rf"^({PATH_SEGMENT}(/{PATH_SEGMENT})*/?)?$"


class BenchmarkRunSpec(Model):
    selector: BoardSelector = Field(json_schema_extra=immutable("selector is immutable"))
    plan: Name | None = Field(None, description="Name of a TestPlan object.",
                              json_schema_extra=immutable("plan is immutable"))
    suites: list[SuiteSpec] | None = Field(
        None, max_length=64, description="Inline suites (if the lab policy allows them).",
        json_schema_extra=immutable("suites are immutable"))
    iterations: int = Field(1, ge=1, le=1000, json_schema_extra=immutable("iterations is immutable"),
                            description=("How many times every suite of the plan runs "
                                         "(immutable). Leave unset with repeat."))
    warmupIterations: int = Field(0, ge=0, le=100,
                                  json_schema_extra=immutable("warmupIterations is immutable"),
                                  description=("Iterations run and recorded first but left out of "
                                               "the statistics (immutable)."))
    bootCycles: int = Field(1, ge=1, le=100, json_schema_extra=immutable("bootCycles is immutable"),
                            description=("Boots to time (immutable); the last one continues into "
                                         "the suites."))
    repeat: RepeatSpec | None = Field(
        None, description="Adaptive repetition instead of a fixed number of iterations.",
        json_schema_extra=immutable("repeat is immutable"))
    priority: int = Field(100, ge=0, le=1000, description="Higher runs first.")
    timeoutSeconds: int = Field(3600, ge=10, le=7 * 86400,
                                description="Limit from board acquisition to the end.")
    queueTimeoutSeconds: int | None = Field(None, ge=1, le=30 * 86400, description=(
        "Fail the run (QueueTimeout) when no matching board became free this long after it was "
        "created."))
    cancel: bool = Field(False, description="Stop the run and keep its record.")
    artifactPrefix: Annotated[str, Field(max_length=128, pattern=ARTIFACT_PREFIX_PATTERN)] = Field(
        "", description=("Extra folders for this run's artifacts, after the run's own "
                         "<namespace>/<name>/<uid>/ (e.g. nightly/2024-06-01); segments of letters, "
                         "digits, '.', '_', '-' that do not start with '.', no leading '/'."),
        json_schema_extra=immutable("artifactPrefix is immutable"))
    baseline: Name | None = Field(None, description="A finished run in the same namespace to compare with.")
    ttlSecondsAfterFinished: int | None = Field(None, ge=0, le=365 * 86400, description=(
        "Delete the finished run this long after it ended (its artifacts stay in the store)."))
    software: SoftwareSet | None = Field(
        None, description="Software under test to deploy and boot instead of the board's own.",
        json_schema_extra=immutable("software is immutable"))
    softwareB: SoftwareSet | None = Field(
        None, description=("A second software set: iterations alternate A (software) and B on "
                           "the same board, and B is judged against A."),
        json_schema_extra=immutable("softwareB is immutable"))

    def software_sets(self) -> list[tuple[str, SoftwareSet | None]]:
        """(label, set) of each side: one side without A/B (its set may be None)."""
        if self.softwareB is None:
            return [(self.software.name or "A" if self.software else "", self.software)]
        assert self.software is not None
        return [(self.software.name or "A", self.software),
                (self.softwareB.name or "B", self.softwareB)]


BENCHMARKRUN_SPEC_RULES = [
    {"rule": "has(self.plan) != has(self.suites)",
     "message": "set exactly one of plan (a TestPlan name) or suites (inline suites)"},
    {"rule": "has(self.selector.deviceType) || has(self.selector.board)",
     "message": "selector needs deviceType or board"},
    {"rule": "has(self.plan) == has(oldSelf.plan)", "message": "plan is immutable"},
    {"rule": "!has(self.repeat) || self.iterations == 1",
     "message": "with repeat, the number of iterations is decided by repeat (minIterations, "
                "maxIterations); leave iterations unset"},
    {"rule": "!has(self.repeat) || self.repeat.minIterations <= self.repeat.maxIterations",
     "message": "repeat.minIterations must not exceed repeat.maxIterations"},
    {"rule": "!has(self.softwareB) || has(self.software)",
     "message": "softwareB is the B side of an A/B run: give software (the A side) too"},
    {"rule": "!has(self.softwareB) || (self.bootCycles == 1 && !has(self.repeat) && "
             "!has(self.baseline))",
     "message": "an A/B run boots each side before each of its iterations (those are its timed "
                "boots) and is its own baseline (B is judged against A): leave bootCycles, "
                "repeat and baseline unset"},
    {"rule": "!has(self.suites) || self.suites.map(s, size(s.command) + "
             "(has(s.background) ? size(s.background) : 0)).sum() <= 65536",
     "message": "inline suites may hold at most 64 KiB of commands; put larger plans in a TestPlan"},
]


class StepsDone(Model):
    """`status.checkpoint`: how far the session is, in the steps of its attempt."""

    attempt: int
    done: int
    total: int
    last: str


class BenchmarkRunStatus(Status):
    """`status` of a BenchmarkRun, as the operator and its session write it. Read leniently
    (`BenchmarkRunStatus.of`: a status from another version of benchfarm still reads); the
    operator's writes are `BenchmarkRunStatusPatch`, which takes only these fields. A field
    with a description is in the CRD's status schema (`api.crdgen.status_schema`)."""

    phase: str | None = Field(None, description="Pending, Running, Succeeded, Failed or Cancelled.")
    conditions: list[Condition] = Field(default_factory=list)
    board: str | None = Field(None, description="The board (labgrid place) the run holds or held.")
    queuePosition: int | None = None
    progress: str | None = None
    bootSeconds: str | None = None
    attempts: int | None = None
    startTime: str | None = None
    completionTime: str | None = None
    results: dict[str, Any] | None = None
    artifacts: list[str] | None = None
    provenance: dict[str, Any] | None = None
    observedGeneration: int | None = None
    # the operator's: admission, the queue, launches and hand-backs
    planDigest: str | None = None           # the resolved plan's digest (`core.policy.trust.plan_digest`)
    resolvedSuites: list[dict[str, Any]] | None = None   # the suites the session runs
    resolvedSuitesSignature: str | None = None   # the operator's signature over them
    storePrefix: str | None = None          # where its artifacts go in the store
    avoidBoards: list[str] | None = None    # boards a retry must not get (faults seen there)
    busyRequeues: int | None = None         # times someone else held its board
    resumes: int | None = None              # sessions resumed after losing their Lease
    goAhead: GoAhead | None = None          # a session seat: now, or after a relay
    # the session's
    checkpoint: StepsDone | None = None     # the steps it finished of its attempt
    boardReleased: bool | None = None       # its board is free; it only uploads and reports
    sessionEnd: SessionEnd | None = None    # its hand-back of the attempt to the operator


class BenchmarkRunStatusPatch(BenchmarkRunStatus):
    """A write of a run's status (`core.scheduling.transitions`): only the fields above, so a misspelt
    field is an error where it is written, not a field nobody reads. Its conditions are the
    status's own list with one condition set (`core.conditions.set_condition`): the others are
    written back as they were read, whoever wrote them."""

    model_config = ConfigDict(extra="forbid")
    conditions: list[dict[str, Any]] = Field(default_factory=list)  # type: ignore[assignment]
