"""Notification: what a namespace wants to be told, where, and what a receiver gets.

A Notification subscribes its own namespace to events (a run finished, a regression against its
baseline, a change point in its history, a campaign published, a lease granted, ending soon or
ended; in the operator's namespace, the lab admin's, a board quarantined or back) and names
where they go: a webhook (JSON signed with HMAC-SHA256, or a Slack-compatible `{"text": ...}`)
and e-mail, and may submit each finished run's results to a KCIDB endpoint (KernelCI's
database of test results: the same document as `benchfarm export kcidb`). The operator's
notifier (`operator.notifications.notifier`) matches events to subscriptions
(`core.notifications`), keeps every delivery in a durable outbox (`history.outbox`) and
delivers it at least once (`notify`). What the CRD, the notifier and a receiver agree on is
defined here: the spec and status, the event kinds, the body a receiver gets and its headers, the
Secret the signing keys and tokens live in.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from benchfarm.api.base import Condition, Model, Status

#: The one Secret (per namespace) the operator may read, by RBAC resourceNames: the signing keys
#: of the namespace's webhooks, one data key each (security.md says why one fixed name).
SECRET_NAME = "benchfarm-notifications"

# the headers of a webhook delivery (docs/howto/notifications.md shows how to verify them)
DELIVERY_HEADER = "X-Benchfarm-Delivery"     # the delivery's id: the same on every retry
EVENT_HEADER = "X-Benchfarm-Event"           # the event's kind
TIMESTAMP_HEADER = "X-Benchfarm-Timestamp"   # seconds since the epoch, when the attempt was signed
SIGNATURE_HEADER = "X-Benchfarm-Signature"   # sha256=<hex HMAC of "<timestamp>.<body>">


class EventKind(StrEnum):
    """What a Notification can subscribe to (`spec.events`)."""

    run_finished = "RunFinished"            # a BenchmarkRun ended (filtered by spec.outcomes)
    regression = "Regression"               # a run regressed against its baseline (Regressed)
    change_point = "ChangePoint"            # the history of a series changed at a run
    campaign_finished = "CampaignFinished"  # a campaign published its guide (or could not)
    bisection_finished = "BisectionFinished"  # a bisection answered (or could not)
    lease_granted = "LeaseGranted"          # a BoardLease got its board
    lease_ending = "LeaseEnding"            # a granted lease ends soon (leaseWarningSeconds)
    lease_ended = "LeaseEnded"              # a lease's board is off and back in the lab
    board_quarantined = "BoardQuarantined"  # lab admin only: a board was taken out of service
    board_back = "BoardBack"                # lab admin only: a quarantined board passed its check


#: Events about the lab's boards, not a namespace's things: only a Notification in the
#: operator's own namespace (the lab admin's) may subscribe to them.
LAB_ADMIN_EVENTS = frozenset({EventKind.board_quarantined, EventKind.board_back})


class RunOutcome(StrEnum):
    """The phases a run ends in (`spec.outcomes` of RunFinished)."""

    succeeded = "Succeeded"
    failed = "Failed"
    cancelled = "Cancelled"


class WebhookFormat(StrEnum):
    json = "JSON"     # the event as JSON (NotificationBody), signed
    slack = "Slack"   # {"text": summary}: Slack, Mattermost, Rocket.Chat incoming webhooks


class Target(StrEnum):
    """Where one delivery goes: each event makes one delivery per target of the Notification."""

    webhook = "webhook"
    email = "email"
    kcidb = "kcidb"     # RunFinished only: the run's KCIDB document


#: The events a KCIDB target submits: a finished run's results (a campaign's runs are runs).
KCIDB_EVENTS = frozenset({EventKind.run_finished})


KeyName = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")]
WebhookUrl = Annotated[str, Field(max_length=2048, pattern=r"^https?://[^\s]+$")]
EmailAddress = Annotated[str, Field(max_length=254,
                                    pattern=r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@"
                                            r"[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?$")]


class Webhook(Model):
    """An HTTP(S) endpoint that receives each event as a POST."""

    url: WebhookUrl = Field(description=(
        "Where to POST, http(s)://. Its host must be on the namespace's LabPolicy "
        "webhookHosts; loopback, link-local, multicast and the lab's internal addresses are "
        "refused, a private one unless that address itself is listed (as for software URLs)."))
    format: WebhookFormat = Field(WebhookFormat.json, description=(
        "JSON: the event as a JSON object, signed (X-Benchfarm-Signature); Slack: "
        '{"text": "..."} for a chat\'s incoming webhook.'))
    signingKey: KeyName | None = Field(None, description=(
        f"The data key of the Secret {SECRET_NAME} in this namespace whose value signs each "
        "delivery (HMAC-SHA256 over '<timestamp>.<body>'); required with format JSON."))


class Email(Model):
    """E-mail through the lab's SMTP server (STARTTLS; the operator's settings)."""

    to: list[EmailAddress] = Field(min_length=1, max_length=16, description=(
        "Recipients, each in a domain on the namespace's LabPolicy emailDomains (none by "
        "default); the namespace's Notifications have at most notifications.maxRecipients "
        "distinct ones in force."))


class Kcidb(Model):
    """A KCIDB submission endpoint (KernelCI's kcidb-rest `/submit`, or a lab's own): each
    finished run's results, as `benchfarm export kcidb` writes them, POSTed as JSON."""

    url: WebhookUrl = Field(description=(
        "Where to POST the KCIDB v5 document, http(s)://; its host is checked as a webhook's "
        "(the namespace's LabPolicy webhookHosts)."))
    tokenKey: KeyName | None = Field(None, description=(
        f"The data key of the Secret {SECRET_NAME} in this namespace whose value is sent as "
        "`Authorization: Bearer <value>` (kcidb-rest's token)."))


class NotificationSpec(Model):
    events: list[EventKind] = Field(min_length=1, max_length=len(EventKind), description=(
        "What to be told of: " + ", ".join(EventKind) + " (the last two in the operator's "
        "namespace only)."))
    outcomes: list[RunOutcome] = Field(default_factory=list, max_length=len(RunOutcome),
                                       description=(
        "RunFinished only for runs that ended so (Succeeded, Failed, Cancelled); empty: all."))
    webhook: Webhook | None = Field(None, description="Deliver to this webhook.")
    email: Email | None = Field(None, description="Deliver by e-mail.")
    kcidb: Kcidb | None = Field(None, description=(
        "Submit each finished run's results to KCIDB (with RunFinished; its outcomes filter "
        "applies)."))


NOTIFICATION_SPEC_RULES = [
    {"rule": "has(self.webhook) || has(self.email) || has(self.kcidb)",
     "message": "name where to deliver: webhook, email, kcidb"},
    {"rule": "!has(self.kcidb) || self.events.exists(e, e == 'RunFinished')",
     "message": "kcidb submits finished runs: subscribe to RunFinished"},
    {"rule": "!has(self.webhook) || self.webhook.format == 'Slack' || "
             "has(self.webhook.signingKey)",
     "message": f"a JSON webhook is signed: name the key of Secret {SECRET_NAME} "
                "(webhook.signingKey)"},
    {"rule": "self.events.all(e, self.events.exists_one(f, f == e))",
     "message": "each event at most once"},
]


class NotificationReason(StrEnum):
    """The reasons of a Notification's conditions (Ready, Delivered)."""

    accepted = "Accepted"                   # Ready: its events are matched from now on
    webhook_forbidden = "WebhookForbidden"  # Ready=False: the LabPolicy does not allow the URL
    lab_admin_only = "LabAdminOnly"         # Ready=False: board events outside the admin's ns
    email_not_configured = "EmailNotConfigured"   # Ready=False: the lab has no SMTP server
    no_outbox = "OutboxNotConfigured"       # Ready=False: the lab has no database for the outbox
    email_forbidden = "EmailDomainForbidden"  # Ready=False: a recipient's domain is not listed
    too_many_notifications = "TooManyNotifications"  # Ready=False: past maxNotifications
    too_many_recipients = "TooManyRecipients"        # Ready=False: past maxRecipients
    rate_limited = "RateLimited"            # Delivered=False: the latest was refused, past
    #                                         maxDeliveriesPerHour
    delivered = "Delivered"                 # Delivered: the latest attempts all succeeded
    retrying = "Retrying"                   # Delivered=False: a delivery failed, tried again
    gave_up = "GaveUp"                      # Delivered=False: a delivery failed for too long
    waiting = "NothingYet"                  # Delivered=Unknown: nothing to deliver so far


class DeliveryState(StrEnum):
    delivered = "Delivered"
    retrying = "Retrying"
    failed = "Failed"      # given up (BENCHFARM_NOTIFY_GIVE_UP_SECONDS after the event)
    refused = "Refused"    # never attempted: the namespace's maxDeliveriesPerHour was reached


class Delivery(Model):
    """One delivery, as `status.deliveries` lists the latest."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")
    id: str
    event: EventKind
    subject: str           # what it is about: NAMESPACE/NAME of the run, lease, campaign; a board
    target: Target
    state: DeliveryState
    attempts: int
    time: str              # of the latest attempt (or of the event, before any)
    error: str = ""


class NotificationStatus(Status):
    """`status` of a Notification (`operator.notifications.status` writes it)."""

    conditions: list[Condition] = Field(default_factory=list)
    deliveries: list[Delivery] = Field(default_factory=list)
    delivered: int = Field(0, description=(
        "Deliveries made, of those the outbox keeps (a week after they were done)."))
    pending: int = Field(0, description=(
        "Deliveries not made yet: queued, or failed and to be tried again."))
    failed: int = Field(0, description=(
        "Deliveries given up (their event older than BENCHFARM_NOTIFY_GIVE_UP_SECONDS), of "
        "those the outbox keeps."))
    refused: int = Field(0, description=(
        "Deliveries never attempted: the namespace had as many queued in the hour before as "
        "its LabPolicy's notifications.maxDeliveriesPerHour (kept a week)."))
    observedGeneration: int | None = None


DELIVERIES_SHOWN = 10      # status.deliveries: the latest this many



class ObjectRef(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: str               # BenchmarkRun, BenchmarkCampaign, BenchmarkBisection, BoardLease, Board
    name: str
    namespace: str = ""     # "" for a Board
    uid: str = ""


class Event(BaseModel):
    """Something that happened, before it is matched to subscriptions: what producers in the
    operator hand the notifier. `key` names it among all events ever (the same event seen
    twice, e.g. every finished run again when the operator restarts, has the same key: it
    makes one delivery per target, not two)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: EventKind
    key: str
    namespace: str          # whose it is; "" for the lab's (a board's)
    occurredAt: str         # RFC 3339, UTC
    object: ObjectRef
    summary: str            # one line for people (e-mail subject, Slack text)
    details: dict[str, Any] = Field(default_factory=dict)


class NotificationBody(Event):
    """What a JSON webhook receives (and, as text, an e-mail): the event, the delivery's id (a
    receiver dedupes on it: at-least-once means a retry after a lost answer comes again with
    the same id), and the Notification it was delivered for."""

    id: str
    notification: str       # NAMESPACE/NAME of the Notification
