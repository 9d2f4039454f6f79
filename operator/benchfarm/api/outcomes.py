"""What the operator and a board session agree on about a run's course (and a board's health
check): one typed definition each.

The session writes these into the run's status and the operator reads them back (and the other
way round); both import them from here, so a phase, a hand-back or a reason is never a string
spelled on one side and compared on the other. `StrEnum`s: they serialise as their value and
compare equal to it, so a status read from the API server needs no conversion.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict


class Phase(StrEnum):
    """`status.phase` of a BenchmarkRun."""

    pending = "Pending"
    running = "Running"
    succeeded = "Succeeded"
    failed = "Failed"
    cancelled = "Cancelled"

    @property
    def finished(self) -> bool:
        return self in (Phase.succeeded, Phase.failed, Phase.cancelled)


FINISHED = frozenset({Phase.succeeded, Phase.failed, Phase.cancelled})


class HandBack(StrEnum):
    """How a session gave its run back to the operator (`status.sessionEnd.outcome`): the
    operator decides what follows. Only `board_fault` ever counts against the board."""

    board_fault = "BoardFault"   # the board itself failed (its own image too): charge, move
    busy = "Busy"                # someone else holds the place: back to the queue, bounded
    lab_fault = "LabFault"       # a PDU, exporter, staging: not the board's; try another


class BoardFaultKind(StrEnum):
    """What a board fault was (`errors.BoardFault.reason`, `status.sessionEnd.reason`), with the
    lab's own words for it: what a Board's quarantine reason, its events and its health check's
    verdict say to every namespace. What the board printed (a console line of a run's kernel or
    suite) stays in that run's own status; a reason no session writes reads as `other`."""

    crashed = "BoardCrashed"            # a failure marker on the console at the shell
    boot_failed = "BootFailed"          # a failure marker on the console while it booted
    boot_hung = "BootHung"              # the console fell silent while it booted
    boot_timeout = "BootTimeout"        # no shell prompt within the device type's boot time
    serial_silent = "SerialSilent"      # no byte on the console after power-on
    serial_failed = "SerialFailed"      # the console's connection failed
    shell_failed = "ShellFailed"        # the shell stopped speaking labgrid's protocol
    shell_lost = "ShellLost"            # no prompt after a command was interrupted
    bootloader_failed = "BootloaderFailed"   # no bootloader prompt, or it refused a command
    wake_failed = "WakeFailed"          # it did not wake from a low-power mode
    other = "BoardFault"

    @classmethod
    def of(cls, reason: str) -> BoardFaultKind:
        try:
            return cls(reason)
        except ValueError:
            return cls.other

    @property
    def summary(self) -> str:
        """The lab's words for the fault, naming nothing a board printed."""
        return _FAULT_SUMMARIES[self]


_FAULT_SUMMARIES = {
    BoardFaultKind.crashed: "the board went down at its shell (a failure marker on its console)",
    BoardFaultKind.boot_failed: "a boot failed (a failure marker on its console)",
    BoardFaultKind.boot_hung: "a boot hung (its console fell silent)",
    BoardFaultKind.boot_timeout: "no shell prompt within the device type's boot time",
    BoardFaultKind.serial_silent: "its serial console stayed silent after power-on",
    BoardFaultKind.serial_failed: "its serial console's connection failed",
    BoardFaultKind.shell_failed: "its shell stopped answering as expected",
    BoardFaultKind.shell_lost: "its shell did not come back after a command was interrupted",
    BoardFaultKind.bootloader_failed: "its bootloader did not reach its prompt or refused a "
                                      "command",
    BoardFaultKind.wake_failed: "it did not wake from a low-power mode",
    BoardFaultKind.other: "a board fault",
}


def fault_words(reason: str) -> str:
    """A board fault's or a failed health check's reason as a Board says it to every namespace:
    `BootTimeout: no shell prompt within ...` for a board fault's kind, the lab's own code for
    another (`PowerFailed`, `HealthCheckLost`); never a message, which may quote a console."""
    kind = BoardFaultKind.of(reason)
    if kind is not BoardFaultKind.other or not (reason.isascii() and reason.isalnum()) \
            or len(reason) > 64:
        return f"{kind}: {kind.summary}"
    return reason


class Reason(StrEnum):
    """Reasons of the `Succeeded` condition that the operator acts on."""

    completed = "Completed"
    suites_failed = "SuitesFailed"      # suites failed on a healthy board: the board is fine
    run_crashed_board = "RunCrashedBoard"   # the run's own suites or software took the board
    #                                         down twice, and each time the board's own image
    #                                         booted again: the board is fine
    software_boot_failed = "SoftwareBootFailed"   # the run's own software did not boot, and
    #                                               the board's own image did: the board is fine
    cancelled = "Cancelled"
    too_many_resumes = "TooManyResumes"
    board_taken = "BoardTaken"          # sent back to the queue (Busy) more times than allowed

    @property
    def board_is_fine(self) -> bool:
        """A run that ended so proves its board healthy: its failure count starts over."""
        return self in (Reason.completed, Reason.suites_failed, Reason.run_crashed_board,
                        Reason.software_boot_failed)


class Condition(StrEnum):
    """`status.conditions[].type`: the conditions of a BenchmarkRun, a BenchmarkCampaign and a
    BoardLease (and the reasons of the events named after them)."""

    succeeded = "Succeeded"   # run, campaign: True or False once it ended, Unknown before
    scheduled = "Scheduled"   # run: True while a board and a session are its
    regressed = "Regressed"   # run, campaign: a metric regressed against the baseline
    granted = "Granted"       # lease: the person holds the board


class Measurement(StrEnum):
    """Reasons of the events a session writes about a measurement (not a run's condition)."""

    #: an iteration was measured outside its envelope and is measured again
    retaken = "IterationRetaken"


class Regression(StrEnum):
    """Reasons of the `Regressed` condition of a run (with a baseline) and a campaign."""

    regressed = "MetricsRegressed"   # Regressed True: the metrics that regressed are named
    none = "NoRegression"            # Regressed False: no metric compared regressed
    #: Regressed Unknown: the baseline run was not found, had not finished or was unreadable
    baseline_unavailable = "BaselineUnavailable"


class Underway(StrEnum):
    """Reasons of a run's conditions while it is under way, written by the operator and its
    session alike (`core.scheduling.transitions`, `session.status`)."""

    queued = "Queued"                   # Succeeded Unknown: waiting for a board
    booting = "Booting"                 # Succeeded Unknown: its session boots the board
    resuming = "Resuming"               # Succeeded Unknown: a resumed session boots it again
    running = "Running"                 # Succeeded Unknown: its suites run
    board_assigned = "BoardAssigned"    # Scheduled True: a board and a session are its
    requeued = "Requeued"               # Scheduled False: back in the queue


def attempt_of(status: Mapping[str, Any], default: int = 0) -> int:
    """`status.attempts` (the operator's count of a run's launches on a board), as both programs
    read it: whoever else wrote the status, something that is no count reads as `default`, not
    as an exception in a scheduling round or a supervision pass that serve every run."""
    raw = status.get("attempts")
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        return default
    try:
        return int(raw) or default
    except ValueError:
        return default


class SessionEnd(BaseModel):
    """`status.sessionEnd`: a session's hand-back, for the attempt it ran."""

    model_config = ConfigDict(extra="ignore")

    attempt: int
    outcome: HandBack
    reason: str = ""
    message: str = ""
    party: str = "lab"


class SessionKind(StrEnum):
    """What a launched session does: `benchfarm session <kind> ...` (the launcher's argv)."""

    run = "run"                  # a BenchmarkRun's session: NAMESPACE/NAME
    health_check = "health"      # a quarantined board's health check: BOARD CHECK
    lease_end = "lease-end"      # the end of a BoardLease: power off, release: NAMESPACE/NAME


class HealthVerdict(StrEnum):
    """How a health check ended (`status.healthCheckEnd.verdict` of the Board)."""

    passed = "Passed"     # the board's own image booted to its prompt: back in service
    failed = "Failed"     # it did not (or the lab would not let it try): still quarantined


class HealthCheck(BaseModel):
    """`status.healthCheck` of a Board, written by the operator as it launches check `check`
    (counted per board, so a check's session and its labgrid identity are its own)."""

    model_config = ConfigDict(extra="ignore")

    check: int
    startedAt: str = ""


class HealthCheckEnd(BaseModel):
    """`status.healthCheckEnd` of a Board: the verdict of health check `check`, written by its
    session before it gives up its Lease; the operator acts on the one of its latest check."""

    model_config = ConfigDict(extra="ignore")

    check: int
    verdict: HealthVerdict
    reason: str = ""
    message: str = ""


class Refusal(StrEnum):
    """Why a run may not do what its spec (or its status) asks."""

    #: the namespace may not boot its own software on shared boards (LabPolicy allowSoftware)
    softwareNotAllowed = "SoftwareNotAllowed"
    #: an artifact URL points outside what the namespace may read (its prefix, granted sources,
    #: allow-listed hosts), or at the lab's own or internal addresses
    artifactForbidden = "ArtifactForbidden"
    #: a software URL the lab did not fetch for a reason only the network knows (no such
    #: object, an HTTP error, no answer, a name that does not resolve or resolves where the lab
    #: does not fetch from, a redirect elsewhere): one reason and one message for all, so a
    #: tenant cannot map hosts and ports by what the lab answered (its log keeps which)
    artifactUnavailable = "ArtifactUnavailable"
    #: the suites in the run's status are not the ones the operator admitted (signature)
    statusTampered = "StatusNotTrusted"


class LeasePhase(StrEnum):
    """`status.phase` of a BoardLease."""

    pending = "Pending"        # in the queue
    granted = "Granted"        # the person holds the board until status.expiresAt
    releasing = "Releasing"    # ended: its session powers the board off and releases it
    ended = "Ended"            # the board is off and back in the lab
    refused = "Refused"        # the LabPolicy does not allow it (never queued)

    @property
    def finished(self) -> bool:
        return self in (LeasePhase.ended, LeasePhase.refused)


class LeaseReason(StrEnum):
    """Reasons of a BoardLease's `Granted` condition and its events."""

    queued = "Queued"
    granted = "Granted"
    extended = "Extended"
    expiring = "LeaseExpiring"          # the warning before the end
    expired = "Expired"
    released = "Released"               # spec.release
    deleted = "Deleted"
    not_allowed = "LeaseNotAllowed"     # the namespace may not lease (LabPolicy leases.allowed)
    too_long = "LeaseTooLong"           # over leases.maxLeaseSeconds
    no_matching_board = "NoMatchingBoard"   # no board of the lab fits its selector
    user_not_allowed = "UserNotAllowed"  # spec.user is one of the lab's labgrid identities
    powered_off = "PoweredOff"
    power_off_failed = "PowerOffFailed"  # released anyway: the lab's fault, said loudly
    lock_retaken = "LockRetaken"        # the coordinator forgot the lock (a restart): taken back


class LeaseEnd(BaseModel):
    """`status.leaseEnd` of a BoardLease: written by its end session (`lease-end`) once the
    board is off (or could not be switched off) and the place released."""

    model_config = ConfigDict(extra="ignore")

    poweredOff: bool
    message: str = ""
    at: str = ""


class Blame(StrEnum):
    """Whose fault a failed run is, for whoever acts on it (a CI pipeline: retry later, or not)."""

    lab = "Lab"   # the board, the lab's services, the store, the API: the same run may pass later
    run = "Run"   # its own input, software or suites: the same run fails the same way again


class LabFault(StrEnum):
    """The lab's own reasons for an infrastructure error (`errors.InfraError` and `Outage`): a
    service or the wiring failed, not the run and not the board. A run handed back with one is
    tried again (an outage is waited out), and fails with it once out of retries: the lab's."""

    # its services (`errors.Outage`: waited out)
    api_unreachable = "ApiUnreachable"                  # the Kubernetes API server
    coordinator_unreachable = "CoordinatorUnreachable"  # the labgrid coordinator
    store_unreachable = "StoreUnreachable"              # the artifact store (S3, MinIO)
    store_error = "StoreError"                          # the store refused a request
    database_unreachable = "DatabaseUnreachable"        # the results database
    # its configuration
    store_not_configured = "StoreNotConfigured"         # no artifact store is set up
    no_store_credential = "NoStoreCredential"           # no store account for the namespace
    database_not_configured = "DatabaseNotConfigured"   # no results database is set up
    bad_configuration = "BadConfiguration"              # a setting the lab cannot work with
    bad_key = "BadKey"                                  # an artifact key escapes the spool
    # its wiring
    lab_unreachable = "LabUnreachable"      # a labgrid driver of the place did not activate
    power_failed = "PowerFailed"            # the power switch did not switch the board
    staging_failed = "StagingFailed"        # the software was not staged on the exporter
    place_incomplete = "PlaceIncomplete"    # the place lacks a port (serial, power) it needs
    environment_invalid = "EnvironmentInvalid"   # a device type's labgrid environment
    no_monitor = "NoMonitor"                # the power rails asked for cannot be measured here
    monitor_failed = "MonitorFailed"        # the rail monitor failed while measuring
    health_check_lost = "HealthCheckLost"   # a board's health check session ended without a word
    foreign_session_object = "ForeignSessionObject"   # a session's Job or Pod name is taken


class RunFailure(StrEnum):
    """The reasons a run's `Succeeded` condition ends False with besides `Reason` and `Refusal`:
    what admission, a session and the scheduler write (`RunError(reason=...)` and `finish`)."""

    # the request, refused at admission (or by the session's own checks of it)
    policy_violation = "PolicyViolation"
    spec_too_large = "SpecTooLarge"
    plan_not_found = "PlanNotFound"
    invalid_plan = "InvalidPlan"
    invalid_software = "InvalidSoftware"
    software_unsupported = "SoftwareUnsupported"
    no_gpu = "NoGPU"
    no_low_power_mode = "NoLowPowerMode"
    missing_programs = "MissingPrograms"
    invalid_artifact_prefix = "InvalidArtifactPrefix"
    no_matching_board = "NoMatchingBoard"
    unknown_suite = "UnknownSuite"
    digest_mismatch = "DigestMismatch"      # the artifact is not the build its digest names
    digest_missing = "DigestMissing"        # its SHA256SUMS does not list it
    deleted = "Deleted"
    #: the run's own steps outlasted its spec.timeoutSeconds
    run_timeout = "RunTimeout"
    #: parsing what a step printed took more CPU time (or memory) than the lab allows a parse
    #: (BENCHFARM_PARSE_CPU_SECONDS): the board's output, not the board, is to blame
    parse_over_budget = "ParseOverBudget"
    #: building the run's results and reports from its figures took more CPU time (or memory)
    #: than the lab allows (BENCHFARM_REPORT_CPU_SECONDS): the run's figures are to blame
    report_over_budget = "ReportOverBudget"
    #: the run's steps yielded more metrics than its LabPolicy allows (maxMetricsPerRun), or a
    #: metric whose name or labels are longer than any real suite's: none of them is kept
    too_many_metrics = "TooManyMetrics"
    #: a suite step got no valid measurement: every retake of an iteration was measured outside
    #: the envelope (too hot, throttled, capped, busy). Neither the build nor the board is
    #: charged: the same run may pass in a cooler, quieter lab
    outside_envelope = "OutsideEnvelope"
    # the lab's
    #: a service the run needed (store, API, coordinator) stayed down past the run's timeout
    outage_outlasted_run = "OutageOutlastedRun"
    queue_timeout = "QueueTimeout"          # no matching board became free in time
    place_missing = "PlaceMissing"          # the board vanished from the lab
    internal_error = "InternalError"        # a bug of benchfarm's
    signing_key_missing = "SigningKeyMissing"   # the lab's misconfiguration


#: Every reason that is the run's own fault. Any other reason a run fails with is the lab's: the
#: infrastructure errors (`errors.InfraError` and its kinds: board, lab, store, API) hand a run
#: back and fail it with their own reason once it is out of retries, and those are many.
RUN_FAULTS: frozenset[str] = frozenset({
    Reason.suites_failed, Reason.run_crashed_board, Reason.software_boot_failed,
    *Refusal,
    RunFailure.policy_violation, RunFailure.spec_too_large, RunFailure.plan_not_found,
    RunFailure.invalid_plan, RunFailure.invalid_software, RunFailure.software_unsupported,
    RunFailure.no_gpu, RunFailure.no_low_power_mode, RunFailure.missing_programs,
    RunFailure.invalid_artifact_prefix, RunFailure.no_matching_board, RunFailure.unknown_suite,
    RunFailure.digest_mismatch, RunFailure.digest_missing, RunFailure.deleted,
    RunFailure.run_timeout, RunFailure.parse_over_budget, RunFailure.too_many_metrics,
    RunFailure.report_over_budget,
})


def blame(reason: str) -> Blame:
    """Whose fault a run that failed with `reason` (its `Succeeded` condition's) is."""
    return Blame.run if reason in RUN_FAULTS else Blame.lab


class Verdict(StrEnum):
    """A metric's verdict against its baseline (`comparison.rows[].verdict` of metrics.json)."""

    regressed = "regressed"
    improved = "improved"
    unchanged = "unchanged"


class StepVerdict(StrEnum):
    """A bisection step's verdict on one build against the reference (the good build), as
    `git bisect` names them where it has the word: `core.bisection` decides it, the status and
    `benchfarm bisect log` carry it."""

    good = "good"          # confidently less than the bisection's threshold worse
    bad = "bad"            # worse by at least the threshold, confidently more than half of it
    unclear = "unclear"    # an effect between the two, or no confidence within the step's bound
    skip = "skip"          # the build did not boot or its suite failed (the build's fault)


class BisectionAnswer(StrEnum):
    """What a finished bisection found (`core.bisection.search.Answer.kind`)."""

    culprit = "Culprit"            # one build: the first bad one, its predecessor good
    range = "Range"                # the first bad build is one of several: skipped or unclear
    #                                builds lie between the last good and the first bad one
    no_change = "NoChange"         # every build up to the bad end measured good
    inconclusive = "Inconclusive"  # no build measured bad, but some were skipped or unclear
