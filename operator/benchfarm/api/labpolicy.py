"""The LabPolicy's shape: what each namespace may ask of the lab (`NamespacePolicy`: priorities,
timeouts, boards, software, leases, webhooks, e-mail, notifications), the regression rule's
thresholds, and the lab's own settings of quarantine, retries and direct labgrid locks
(`LabPolicySpec`). No I/O.
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated

from pydantic import Field

from benchfarm.api.base import PATH_SEGMENT, Model, Name
from benchfarm.api.boards import DirectLocks

SoftwareSource = Annotated[str, Field(max_length=256, pattern=rf"^({PATH_SEGMENT}/)+$")]
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
