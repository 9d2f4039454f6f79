"""The shapes of benchfarm's custom resources, as pydantic models.

They are the single source of truth: the CRDs in `crds/` are generated from them (and a test fails
when the committed files drift), and the operator validates every object it reads through them.
No I/O here.
"""

from __future__ import annotations

from enum import Enum
from functools import cached_property
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from benchfarm.api.grants import GoAhead
from benchfarm.api.outcomes import LeaseEnd, SessionEnd
from benchfarm.api.status import Status
from benchfarm.api.suites import SUITE_NAMES

GROUP = "benchfarm.io"
VERSION = "v1alpha1"

Name = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")]
LabelKey = Annotated[str, Field(max_length=63)]
LabelValue = Annotated[str, Field(max_length=63)]
ParamValue = Annotated[str, Field(max_length=256)]


class Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")


def _immutable(message: str) -> dict[str, Any]:
    return {"x-kubernetes-validations": [{"rule": "self == oldSelf", "message": message}]}


class BoardSelector(Model):
    """Which boards may run this: a device type and labels, or one board by name."""

    deviceType: Name | None = Field(None, description="Device type of the board, e.g. qemu-x86.")
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=16,
                                               description="Labels the board must carry.")
    board: Name | None = Field(None, description="One board (labgrid place) by name.")


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


class TestPlanSpec(Model):
    __test__ = False  # not a pytest class, despite the name

    description: Annotated[str, Field(max_length=1024)] = Field(
        "", description="What the plan measures, for people (kubectl get testplans shows it).")
    suites: list[SuiteSpec] = Field(min_length=1, max_length=64,
                                    description="The plan's steps, run in order on every iteration.")


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


# path segments that cannot start with "." (so no "." or ".." segments), no leading "/"
_SEGMENT = r"[A-Za-z0-9_-][A-Za-z0-9._-]*"
ARTIFACT_PREFIX_PATTERN = rf"^({_SEGMENT}(/{_SEGMENT})*/?)?$"


class BenchmarkRunSpec(Model):
    selector: BoardSelector = Field(json_schema_extra=_immutable("selector is immutable"))
    plan: Name | None = Field(None, description="Name of a TestPlan object.",
                              json_schema_extra=_immutable("plan is immutable"))
    suites: list[SuiteSpec] | None = Field(
        None, max_length=64, description="Inline suites (if the lab policy allows them).",
        json_schema_extra=_immutable("suites are immutable"))
    iterations: int = Field(1, ge=1, le=1000, json_schema_extra=_immutable("iterations is immutable"),
                            description=("How many times every suite of the plan runs "
                                         "(immutable). Leave unset with repeat."))
    warmupIterations: int = Field(0, ge=0, le=100,
                                  json_schema_extra=_immutable("warmupIterations is immutable"),
                                  description=("Iterations run and recorded first but left out of "
                                               "the statistics (immutable)."))
    bootCycles: int = Field(1, ge=1, le=100, json_schema_extra=_immutable("bootCycles is immutable"),
                            description=("Boots to time (immutable); the last one continues into "
                                         "the suites."))
    repeat: RepeatSpec | None = Field(
        None, description="Adaptive repetition instead of a fixed number of iterations.",
        json_schema_extra=_immutable("repeat is immutable"))
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
        json_schema_extra=_immutable("artifactPrefix is immutable"))
    baseline: Name | None = Field(None, description="A finished run in the same namespace to compare with.")
    ttlSecondsAfterFinished: int | None = Field(None, ge=0, le=365 * 86400, description=(
        "Delete the finished run this long after it ended (its artifacts stay in the store)."))
    software: SoftwareSet | None = Field(
        None, description="Software under test to deploy and boot instead of the board's own.",
        json_schema_extra=_immutable("software is immutable"))
    softwareB: SoftwareSet | None = Field(
        None, description=("A second software set: iterations alternate A (software) and B on "
                           "the same board, and B is judged against A."),
        json_schema_extra=_immutable("softwareB is immutable"))

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


class Condition(Model):
    """One of a status's conditions (Kubernetes' form); fields another writer added are kept."""

    model_config = ConfigDict(extra="allow")
    type: str
    status: str
    reason: str = ""
    message: str = ""
    lastTransitionTime: str | None = None
    observedGeneration: int | None = None


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


class DirectLocks(str, Enum):  # noqa: UP042 - as BoardState
    respect = "Respect"
    report = "Report"


class BoardState(str, Enum):  # noqa: UP042 - StrEnum would change str() and format() of a member
    idle = "Idle"
    busy = "Busy"
    quarantined = "Quarantined"
    offline = "Offline"
    maintenance = "Maintenance"


# What the operator writes and the dashboard reads besides the objects' fields:
# a board someone else holds in labgrid (a person's lock, a reservation) has BoardStatus.run
# HELD_PREFIX + the holder; who was served last per namespace (the queue's turn order) is the
# ConfigMap FAIRNESS_CONFIG_MAP in the operator's namespace, key FAIRNESS_KEY: JSON {namespace:
# seconds since the epoch}.
HELD_PREFIX = "labgrid: "
FAIRNESS_CONFIG_MAP = "benchfarm-fairness"
FAIRNESS_KEY = "lastServed"


def held_by(run: str | None) -> str | None:
    """Who holds the board in labgrid, from BoardStatus.run; None when nobody else does."""
    return run[len(HELD_PREFIX):] if run and run.startswith(HELD_PREFIX) else None


class BoardSpec(Model):
    maintenance: bool = Field(False, description="Drain: finish the current run, take no new one.")


class BoardStatus(Status):
    deviceType: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    state: BoardState | None = None
    run: str | None = None
    consecutiveInfraFailures: int = 0
    reason: str | None = None
    quarantinedAt: str | None = None


SoftwareSource = Annotated[str, Field(max_length=256, pattern=rf"^({_SEGMENT}/)+$")]
SoftwareHost = Annotated[str, Field(max_length=253, pattern=(
    r"^([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?$"))]


class LeasePolicy(Model):
    """Whether a namespace's people may lease boards (BoardLease), and for how long at most."""

    allowed: bool = Field(False, description="May this namespace create BoardLeases?")
    maxLeaseSeconds: int = Field(4 * 3600, ge=60, le=7 * 86400, description=(
        "The longest a lease may last (its spec.duration, extensions included)."))


#: a domain as e-mail addresses end (api.notifications.EmailAddress's part after the @)
EmailDomain = Annotated[str, Field(max_length=253,
                                   pattern=r"^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?$")]


class NotificationLimits(Model):
    """What a namespace's Notifications may ask of the lab's notifier and its mail relay. Over a
    limit, the Notification says so in its conditions and nothing of it is sent."""

    maxNotifications: int = Field(20, ge=0, le=1000, description=(
        "Notifications of the namespace in force at once: the oldest this many (by creation); "
        "a newer one is Ready=False (TooManyNotifications) and delivers nothing."))
    maxRecipients: int = Field(10, ge=0, le=1000, description=(
        "Distinct e-mail addresses over all of the namespace's Notifications in force, counted "
        "oldest Notification first; one that would bring more is Ready=False "
        "(TooManyRecipients)."))
    maxDeliveriesPerHour: int = Field(300, ge=0, le=100000, description=(
        "Deliveries (one per event and target: a webhook POST, an e-mail, a KCIDB submission) "
        "queued for the namespace in any hour; past it an event's deliveries are refused, "
        "never attempted (status.deliveries shows them Refused), and the Notification says so "
        "(Delivered=False, RateLimited)."))


class NamespacePolicy(Model):
    namespace: Name = Field(description=(
        "The namespace this entry applies to (unused in `default`, which applies to every "
        "namespace without an entry of its own)."))
    maxPriority: int = Field(1000, ge=0, le=1000, description=(
        "Highest priority a run or lease of the namespace may ask for; a run asking for more is "
        "refused at admission (PolicyViolation)."))
    maxTimeoutSeconds: int = Field(7 * 86400, ge=10, le=7 * 86400, description=(
        "Longest timeoutSeconds a run of the namespace may ask for (it holds its board that "
        "long at most); a run asking for more is refused at admission (PolicyViolation)."))
    maxBoards: int = Field(1000, ge=0, le=100000, description=(
        "Boards the namespace's runs and leases may hold at once."))
    allowInlineSuites: bool = Field(False, description=(
        "May the namespace's runs carry their own suites (spec.suites) instead of a TestPlan?"))
    allowSoftware: bool = Field(False, description=(
        "May runs of this namespace boot their own kernel, initrd, dtb and modules, or their "
        "own kernel command line (bootArgs) (spec.software, spec.softwareB)? That is root on a "
        "shared board: grant it only to namespaces trusted with the boards."))
    softwareSources: list[SoftwareSource] = Field(
        default_factory=list, max_length=64, description=(
            "Key prefixes in the lab's artifact bucket this namespace may boot software from, "
            "besides its own <namespace>/ (e.g. builds/ for the lab's published kernel builds). "
            "Each is folders ending with '/'; no '.' or '..' segments."))
    softwareHosts: list[SoftwareHost] = Field(
        default_factory=list, max_length=64, description=(
            "http(s) hosts this namespace may download software from: an exact host name "
            "(any port) or host:port. None by default. A host that is or resolves to a "
            "loopback, link-local, multicast or internal address of the lab is refused even "
            "when listed. One that is or resolves to a private or otherwise non-global address "
            "(RFC 1918, 100.64.0.0/10, fc00::/7, reserved ranges, and IPv6 forms carrying "
            "such an IPv4 address: mapped, compatible, NAT64, 6to4) is refused unless that "
            "address itself is listed (10.1.2.3, [fd00::5]); listing a name does not list "
            "what it resolves to."))
    maxMetricsPerRun: int = Field(10000, ge=1, le=100000, description=(
        "Metrics a run of the namespace may yield, counted over all its steps and iterations "
        "(a parse's metrics come from what the board printed: their number is the tenant's "
        "choice). The step that goes past it fails the run with TooManyMetrics, and none of "
        "the run's metrics reach its metrics.json, the results history or the exports. The "
        "default leaves room for every plan of the lab: a cyclictest histogram of a hundred "
        "rows is about a hundred metrics an iteration."))
    leases: LeasePolicy = Field(default_factory=LeasePolicy, description=(
        "Interactive board leases (BoardLease) of this namespace's people."))
    webhookHosts: list[SoftwareHost] = Field(
        default_factory=list, max_length=64, description=(
            "http(s) hosts this namespace's Notifications may post to, as softwareHosts: an "
            "exact host name (any port) or host:port; none by default. The operator checks "
            "every address the host resolves to as it does a software host's (never loopback, "
            "link-local, multicast or the lab's internal ranges; a private address only when "
            "listed itself) and connects only to the address it checked."))
    emailDomains: list[EmailDomain] = Field(
        default_factory=list, max_length=64, description=(
            "Domains this namespace's Notifications may send e-mail to through the lab's SMTP "
            "server, each exactly (team-a.example lists neither eng.team-a.example nor "
            "team-a.example.org); none by default. A Notification with a recipient elsewhere "
            "is not in force (EmailDomainForbidden): the lab's relay mails nobody a tenant "
            "chose that the lab did not."))
    notifications: NotificationLimits = Field(default_factory=NotificationLimits, description=(
        "How many Notifications, e-mail recipients and deliveries the namespace may have."))


LABPOLICY_RULES = [
    {"rule": "self.metadata.name == 'default'",
     "message": "the lab has one LabPolicy and it is named default (the operator and its "
                "sessions read no other); edit that one"}]


class RegressionThresholds(Model):
    alpha: float = Field(0.05, gt=0, lt=1, description="Mann-Whitney U significance level.")
    minEffect: float = Field(0.03, ge=0, le=10, description="Smallest relative change that counts.")
    tolerance: float = Field(0.05, ge=0, le=10,
                             description="Widening of a summary baseline's [min, max].")


class RegressionRules(Model):
    default: RegressionThresholds = Field(default_factory=RegressionThresholds, description=(
        "Thresholds for metrics no family entry matches."))
    families: dict[Annotated[str, Field(max_length=63)], RegressionThresholds] = Field(
        default_factory=dict, max_length=64,
        description="Metric name prefix (e.g. cyclictest, lat_mem_rd) -> thresholds.")


class LabPolicySpec(Model):
    default: NamespacePolicy = Field(
        default_factory=lambda: NamespacePolicy(namespace="default-policy"),
        description="Applies to namespaces without an entry.")
    namespaces: list[NamespacePolicy] = Field(default_factory=list, max_length=1000, description=(
        "Per-namespace entries; a namespace without one gets default."))
    quarantineAfterFailures: int = Field(2, ge=1, le=100, description=(
        "Consecutive infrastructure failures after which a board is quarantined."))
    quarantineCooldownSeconds: int = Field(60, ge=0, le=86400, description=(
        "How long a quarantined board rests before its health check."))
    maxInfraRetries: int = Field(2, ge=0, le=20, description=(
        "How often a run is moved to another board after a board or lab fault before it fails."))
    maxBusyRequeues: int = Field(5, ge=0, le=100, description=(
        "How often a run may be sent back to the queue because someone else took its board "
        "(a person's lock) before it fails with BoardTaken."))
    regression: RegressionRules = Field(default_factory=RegressionRules, description=(
        "Thresholds of the regression rule (Mann-Whitney U and the minimum effect)."))
    directLocks: DirectLocks = Field(DirectLocks.respect, description=(
        "A place someone acquired with labgrid outside benchfarm (no BoardLease): Respect "
        "leaves it alone (the scheduler waits); Report leaves it alone too, and sets the Board's "
        "DirectLock condition and a warning event naming the lock's owner."))
    leaseWarningSeconds: int = Field(300, ge=1, le=86400, description=(
        "How long before a BoardLease ends its holder is warned (a LeaseExpiring event)."))

    @cached_property
    def _by_namespace(self) -> dict[str, NamespacePolicy]:
        """Asked for every queued run every round: one lookup, not a scan of up to 1,000 entries.
        A policy is never changed once read (a new LabPolicy makes a new one)."""
        return {p.namespace: p for p in reversed(self.namespaces)}   # the first entry wins

    def for_namespace(self, namespace: str) -> NamespacePolicy:
        return self._by_namespace.get(namespace, self.default)


# -- BoardLease: a person's board, through the same queue -------------------------------------------

#: `90m`, `2h`, `1h30m`, `45s` (core.scheduling.durations reads exactly this)
DURATION_PATTERN = r"^(([0-9]{1,4})h)?(([0-9]{1,6})m)?(([0-9]{1,7})s)?$"
#: labgrid's user as `labgrid-client` names it: LG_HOSTNAME/LG_USERNAME
LabgridUser = Annotated[str, Field(min_length=3, max_length=128,
                                   pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")]


class BoardLeaseSpec(Model):
    selector: BoardSelector = Field(json_schema_extra=_immutable("selector is immutable"))
    duration: Annotated[str, Field(min_length=2, max_length=24, pattern=DURATION_PATTERN)] = Field(
        description=("How long the person keeps the board once granted, in the Kubernetes "
                     "duration form (90m, 2h, 1h30m). Raise it to extend a granted lease, up to "
                     "the LabPolicy's leases.maxLeaseSeconds for the namespace."))
    priority: int = Field(100, ge=0, le=1000, description=(
        "Higher first, in the same queue as BenchmarkRuns; capped by the namespace's ceiling."))
    user: LabgridUser = Field(
        description=("The labgrid user (host/name, i.e. LG_HOSTNAME/LG_USERNAME) the person "
                     "connects as: benchfarm allows it on the place (labgrid-client allow). "
                     "The name is the creator's own Kubernetes user name as labgrid spells it "
                     "(`_` doubled, `:` as `_c`, `@` as `_a`; `benchfarm lease` fills it in) "
                     "and the host never the lab's (benchfarm, operator): the API server "
                     "refuses any other."),
        json_schema_extra=_immutable("user is immutable"))
    release: bool = Field(False, description="Set true to end the lease now (the board is "
                                             "powered off and goes to the next in the queue).")
    publicKey: Annotated[str, Field(max_length=4096, pattern=r"^-----BEGIN PUBLIC KEY-----")] | None = Field(
        None, description=("The person's public key (PEM, EC P-256/P-384 or RSA >= 2048): at the "
                           "grant the operator issues a certificate for `user`, valid until the "
                           "lease expires, into status.access; it is the only way to the "
                           "coordinator (`benchfarm lease --shell` makes the key and uses it)."),
        json_schema_extra=_immutable("publicKey is immutable"))


#: a host name or address as an ssh_config line takes it (no space, no quote)
SshHostName = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9._:%\[\]-]+$")]


class LeaseSshHost(Model):
    """One exporter host as a lease's holder reaches its SSH."""

    name: SshHostName = Field(description="The exporter host as labgrid names it (a resource's "
                                          "extra.proxy): the ssh_config's Host.")
    hostName: SshHostName = Field(description="The address its SSH is reached at.")
    port: int = Field(22, ge=1, le=65535, description="Its SSH port.")
    user: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-z_][a-z0-9_-]*$")] = Field(
        "root", description="The user to log in as (the certificate decides what it may do).")


class LeaseSshAccess(Model):
    """The exporter hosts' SSH for a lease: an OpenSSH user certificate for the lease's public
    key that lets it forward to its own place's console and power only, until the lease ends."""

    certificate: Annotated[str, Field(max_length=8192)] = Field(description=(
        "The OpenSSH user certificate (one `...-cert-v01@openssh.com` line), signed by the lab's "
        "labgrid issuer as the SSH user CA: principal `place:<place>`, key id `<namespace>/<name> "
        "<uid>`, valid until the lease expires, port forwarding only."))
    principal: Annotated[str, Field(max_length=256)] = Field(description=(
        "The certificate's principal (`place:<place>`)."))
    hosts: list[LeaseSshHost] = Field(default_factory=list, max_length=64, description=(
        "The exporter hosts and where their SSH is."))
    knownHosts: Annotated[str, Field(max_length=65536)] = Field("", description=(
        "known_hosts lines pinning those hosts' keys."))


class LeaseAccess(Model):
    """`status.access` of a granted BoardLease whose spec.publicKey the operator signed."""

    coordinator: str = Field(description="The labgrid coordinator's address (mutual TLS).")
    certificate: str = Field(description=(
        "An X.509 client certificate for the lease's user (labgrid role person), expiring with "
        "the lease."))
    ca: str = Field("", description="The CA that vouches for the coordinator (PEM).")
    expiresAt: str = Field(description="When the certificates expire (the lease's end).")
    ssh: LeaseSshAccess | None = Field(None, description=(
        "The exporter hosts' SSH, through which labgrid reaches the place's console and power."))


class BoardLeaseStatus(Status):
    """`status` of a BoardLease: the operator's (its place in the queue, the grant it signed,
    the end) and its end session's (`leaseEnd`). Read as `BoardLeaseStatus.of`; a field with a
    description is in the CRD's status schema (`api.crdgen.status_schema`)."""

    phase: str | None = Field(None, description="Pending, Granted, Releasing, Ended or Refused.")
    conditions: list[Condition] = Field(default_factory=list)
    place: str | None = Field(None, description="The board (labgrid place) granted to the lease.")
    grantedAt: str | None = None
    expiresAt: str | None = Field(None, json_schema_extra={"format": "date-time"}, description=(
        "When the lease ends and its board is powered off and released; raise spec.duration to "
        "extend."))
    grantSignature: str | None = None       # the operator's over `core.policy.trust.LEASE_SIGNED`
    queuePosition: int | None = Field(None, description=(
        "While pending: the lease's place in the lab's queue."))
    estimatedStart: str | None = Field(None, json_schema_extra={"format": "date-time"}, description=(
        "While pending: when a fitting board should be free (a lease's expiry, a run's timeout)."))
    access: LeaseAccess | None = Field(None, description=(
        "While granted, where spec.publicKey was given: the lease's certificates (labgrid's "
        "coordinator, the exporter hosts' SSH) and where they lead."))
    warnedFor: str | None = None            # the expiry its LeaseEnding warning was given for
    endReason: str | None = None            # why it is Releasing (`LeaseReason`, `Refusal`)
    endedAt: str | None = None
    refusedGeneration: int | None = None    # a spec.duration over the namespace's maximum
    leaseEnd: LeaseEnd | None = None        # its end session's report: the board is off


BOARDLEASE_SPEC_RULES = [
    {"rule": "has(self.selector.deviceType) || has(self.selector.board)",
     "message": "selector needs deviceType or board"},
    {"rule": "self.duration.matches('[1-9]')",
     "message": "duration must be longer than zero (e.g. 90m or 2h)"},
    {"rule": "self.release || !oldSelf.release",
     "message": "a released lease stays released (create a new one)"},
]
