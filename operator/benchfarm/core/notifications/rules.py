"""Notifications, decided: who is told of what, what they receive, when a failed delivery is
tried again, and where a webhook may point. Pure: the notifier (`operator.notifications.notifier`) feeds it the
objects it sees and does the I/O (the outbox, HTTP, SMTP).

- Events are derived from what the API says (a run's status, a lease's, a campaign's), each with
  a `key` that names it for good: seen again (every finished run, when the operator restarts)
  it makes no second delivery.
- A subscription sees only its own namespace's events, and only those that happened after it
  was created; board events only in the lab admin's namespace (the operator's).
- A delivery's id is derived from the subscription, the event and the target: a retry, a
  restart, the same event seen twice, all carry the same id, on which a receiver dedupes.
- A webhook's URL passes the same checks as a tenant's software URL (`core.policy.software`):
  its host on the namespace's allow-list (LabPolicy webhookHosts), never a loopback,
  link-local, multicast or internal address, a private one only when listed itself. The lab may
  open loopback ports for receivers of its own (BENCHFARM_WEBHOOK_LOOPBACK_PORTS: the embedded
  lab's tests); no tenant can. An e-mail recipient's domain is on the namespace's emailDomains.
- What a namespace may ask of the lab is capped by its LabPolicy (`notifications`): the oldest
  maxNotifications of its Notifications are in force, their distinct recipients at most
  maxRecipients, and at most maxDeliveriesPerHour deliveries are queued for it in an hour
  (`judge`, `rate_limited`). Each namespace's Notifications are judged and matched apart, so an
  event costs what its own namespace's subscriptions cost.
- Deliveries take turns by namespace (`take_turns`): one namespace's slow receiver holds one
  delivery thread at a time, for one delivery's deadline at most.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from benchfarm.api.models import NamespacePolicy
from benchfarm.api.notifications import (
    KCIDB_EVENTS,
    LAB_ADMIN_EVENTS,
    Delivery,
    DeliveryState,
    Event,
    EventKind,
    NotificationBody,
    NotificationReason,
    NotificationSpec,
    ObjectRef,
    Target,
    WebhookFormat,
)
from benchfarm.api.outcomes import FINISHED, Condition
from benchfarm.core.policy.software import (
    DEFAULT_PORTS,
    Address,
    Network,
    address_problem,
    host_listed,
    http_host,
    internal_networks,
)

SUMMARY_CHARS = 300


# -- settings ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NotifySettings:
    """How deliveries are retried and where webhooks may go, from the operator's environment."""

    backoff_seconds: float = 2.0          # the first retry's delay; doubled at each failure
    backoff_max_seconds: float = 300.0    # at most this between two attempts
    give_up_seconds: float = 86400.0      # a delivery failing this long after its event: Failed
    keep_seconds: float = 7 * 86400.0     # finished deliveries are kept (and events older than
    #                                       this are not delivered: the outbox no longer knows)
    deadline_seconds: float = 20.0        # one attempt, connecting, sending and its answer
    loopback_ports: frozenset[int] = frozenset()
    internal: tuple[Network, ...] = ()

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> NotifySettings:
        """ValueError names a bad setting."""
        def number(name: str, default: float) -> float:
            raw = env.get(name, "")
            try:
                value = float(raw) if raw else default
            except ValueError as exc:
                raise ValueError(f"{name}: {raw!r} is not a number") from exc
            if value <= 0:
                raise ValueError(f"{name}: must be positive")
            return value
        return cls(backoff_seconds=number("BENCHFARM_NOTIFY_BACKOFF_SECONDS", 2.0),
                   backoff_max_seconds=number("BENCHFARM_NOTIFY_BACKOFF_MAX_SECONDS", 300.0),
                   give_up_seconds=number("BENCHFARM_NOTIFY_GIVE_UP_SECONDS", 86400.0),
                   deadline_seconds=number("BENCHFARM_NOTIFY_DEADLINE_SECONDS", 20.0),
                   loopback_ports=ports(env.get("BENCHFARM_WEBHOOK_LOOPBACK_PORTS", "")),
                   internal=internal_networks(env.get("BENCHFARM_INTERNAL_CIDRS", "")))


def ports(text: str) -> frozenset[int]:
    """`8080,27060-27069`: ports and inclusive ranges; ValueError names a bad item."""
    out: set[int] = set()
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        low, _, high = item.partition("-")
        try:
            a, b = int(low), int(high or low)
        except ValueError as exc:
            raise ValueError(f"BENCHFARM_WEBHOOK_LOOPBACK_PORTS: {item!r} is not a port or "
                             "a range of ports") from exc
        if not 0 < a <= b < 65536:
            raise ValueError(f"BENCHFARM_WEBHOOK_LOOPBACK_PORTS: {item!r} is out of range")
        out.update(range(a, b + 1))
    return frozenset(out)


# -- where a webhook may point -------------------------------------------------------------------
@dataclass(frozen=True)
class WebhookReach:
    """Where one namespace's webhooks may post, under the LabPolicy in force."""

    hosts: tuple[str, ...]                 # the namespace's LabPolicy webhookHosts
    internal: tuple[Network, ...] = ()
    loopback_ports: frozenset[int] = field(default_factory=frozenset)

    def address_problem(self, address: Address, port: int) -> str | None:
        """Why a webhook may not connect to this address (a URL's literal one, or one its host
        resolved to), or None."""
        if address.is_loopback and port in self.loopback_ports:
            return None       # a receiver of the lab's own, on the operator's host
        return address_problem(address, self.internal,
                               listed=host_listed(self.hosts, str(address), port))

    def url_problem(self, url: str) -> str | None:
        """Why a webhook may not post to this URL as written (the notifier checks again what
        its host resolves to, at each attempt), or None."""
        if "\\" in url or any(ord(c) < 33 or ord(c) == 127 for c in url):
            return "backslashes, spaces and control characters are not accepted"
        if urlsplit(url).scheme.lower() not in DEFAULT_PORTS:
            return "only http(s):// URLs are accepted"
        where = http_host(url)
        if isinstance(where, str):
            return where
        host, port, literal = where
        if literal is not None and (problem := self.address_problem(literal, port)):
            return problem
        if not host_listed(self.hosts, host, port):
            shown = f"[{host}]" if ":" in host else host
            return (f"host {shown}:{port} is not on the namespace's webhookHosts (LabPolicy); "
                    f"it may post to: {', '.join(self.hosts) or 'none'}")
        return None


# -- subscriptions -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Subscription:
    """A Notification as the notifier keeps it."""

    namespace: str
    name: str
    uid: str
    created: str           # metadata.creationTimestamp: nothing older is delivered
    generation: int
    spec: NotificationSpec

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def targets(self, event: EventKind | None = None) -> list[Target]:
        """Where an event of this kind goes, one delivery each (KCIDB takes finished runs);
        without a kind, every target the Notification names."""
        return [t for t, on in ((Target.webhook, self.spec.webhook is not None),
                                (Target.email, self.spec.email is not None),
                                (Target.kcidb, self.spec.kcidb is not None
                                 and (event is None or event in KCIDB_EVENTS))) if on]


def email_problem(to: Iterable[str], domains: Sequence[str]) -> str | None:
    """Why the lab's relay may not mail these recipients (a domain not on the namespace's
    LabPolicy emailDomains, compared exactly and without case), or None."""
    listed = {d.lower() for d in domains}
    for address in to:
        domain = address.rpartition("@")[2].lower()
        if domain not in listed:
            return (f"{address}: domain {domain} is not on the namespace's emailDomains "
                    f"(LabPolicy); it may mail: {', '.join(domains) or 'none'}")
    return None


def spec_problem(sub: Subscription, admin_namespace: str, reach: WebhookReach,
                 email_configured: bool, outbox: bool, email_domains: Sequence[str] = ()
                 ) -> tuple[NotificationReason, str] | None:
    """Why a Notification cannot be in force as written (its Ready condition), or None."""
    if not outbox:
        return (NotificationReason.no_outbox, "the lab keeps no outbox for notifications (no "
                "results database, BENCHFARM_DATABASE_URL); ask the lab's administrators")
    admin_only = sorted(e.value for e in sub.spec.events if e in LAB_ADMIN_EVENTS)
    if admin_only and sub.namespace != admin_namespace:
        return (NotificationReason.lab_admin_only,
                f"{', '.join(admin_only)}: events of the lab's boards are for the lab's "
                f"administrators, in the operator's namespace only")
    if sub.spec.webhook is not None and (why := reach.url_problem(sub.spec.webhook.url)):
        return NotificationReason.webhook_forbidden, f"webhook {sub.spec.webhook.url}: {why}"
    if sub.spec.kcidb is not None and (why := reach.url_problem(sub.spec.kcidb.url)):
        return NotificationReason.webhook_forbidden, f"kcidb {sub.spec.kcidb.url}: {why}"
    if sub.spec.email is not None and not email_configured:
        return (NotificationReason.email_not_configured,
                "the lab has no SMTP server for e-mail (BENCHFARM_SMTP_HOST); ask the lab's "
                "administrators")
    if sub.spec.email is not None and (why := email_problem(sub.spec.email.to, email_domains)):
        return NotificationReason.email_forbidden, f"e-mail to {why}"
    return None


def judge(subs: Iterable[Subscription], policy: NamespacePolicy, admin_namespace: str,
          reach: WebhookReach, email_configured: bool, outbox: bool
          ) -> dict[str, tuple[NotificationReason, str]]:
    """Why each of one namespace's Notifications is not in force (uid -> reason, message); those
    left out are. Oldest first (creation, then name): past the LabPolicy's maxNotifications
    every one is refused, whatever it says; of the others, each must be in force as written
    (`spec_problem`) and bring the distinct e-mail recipients of those in force before it to no
    more than maxRecipients."""
    limits = policy.notifications
    ordered = sorted(subs, key=lambda s: (s.created, s.name))
    problems: dict[str, tuple[NotificationReason, str]] = {}
    recipients: set[str] = set()
    for i, sub in enumerate(ordered):
        if i >= limits.maxNotifications:
            problems[sub.uid] = (
                NotificationReason.too_many_notifications,
                f"namespace {sub.namespace} has {len(ordered)} Notifications and its LabPolicy "
                f"lets {limits.maxNotifications} be in force (notifications.maxNotifications): "
                f"the oldest; delete some or ask the lab's administrators")
            continue
        problem = spec_problem(sub, admin_namespace, reach, email_configured, outbox,
                               policy.emailDomains)
        if problem is not None:
            problems[sub.uid] = problem
            continue
        if sub.spec.email is not None:
            more = {a.lower() for a in sub.spec.email.to} - recipients
            if len(recipients) + len(more) > limits.maxRecipients:
                problems[sub.uid] = (
                    NotificationReason.too_many_recipients,
                    f"with this one's, the e-mail recipients of namespace {sub.namespace}'s "
                    f"Notifications would be {len(recipients) + len(more)}; its LabPolicy lets "
                    f"them be {limits.maxRecipients} (notifications.maxRecipients)")
                continue
            recipients |= more
    return problems


def rate_limited(namespace: str, cap: int, event: str, subject: str) -> str:
    """The Delivered condition's message when an event's deliveries were not queued: the
    namespace had as many queued in the hour before as its LabPolicy lets it."""
    return (f"{event} {subject} was not delivered: namespace {namespace} had {cap} deliveries "
            f"queued in the hour before, as many as its LabPolicy lets it "
            f"(notifications.maxDeliveriesPerHour)")


def take_turns(namespaces: Iterable[str], turns: Mapping[str, int], free: int) -> list[str]:
    """Which of the namespaces with a delivery due (none of them with one in flight) go now, at
    most `free` (the idle delivery threads): those served longest ago first (`turns`: when each
    was last served, a counter; never: first), then by name. A namespace with a backlog waits
    its turn behind every other namespace with a delivery due."""
    return sorted(namespaces, key=lambda ns: (turns.get(ns, -1), ns))[:max(free, 0)]


def parse_time(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))


def subscribed(sub: Subscription, event: Event, admin_namespace: str) -> bool:
    """Is this subscription told of this event? Its own namespace's, after it was created."""
    if event.kind not in sub.spec.events:
        return False
    if event.kind in LAB_ADMIN_EVENTS:
        if sub.namespace != admin_namespace:
            return False
    elif event.namespace != sub.namespace:     # never another namespace's run, lease, campaign
        return False
    if parse_time(event.occurredAt) < parse_time(sub.created):
        return False
    if event.kind == EventKind.run_finished and sub.spec.outcomes:
        return str(event.details.get("phase")) in sub.spec.outcomes
    return True


def delivery_id(subscription_uid: str, event_key: str, target: Target) -> str:
    """The same for every attempt, restart and sighting of one event for one target."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL,
                          f"benchfarm:notification/{subscription_uid}/{target}/{event_key}"))


# -- events from objects -------------------------------------------------------------------------
def _ref(kind: str, meta: Mapping[str, Any]) -> ObjectRef:
    return ObjectRef(kind=kind, name=str(meta.get("name", "")),
                     namespace=str(meta.get("namespace", "")), uid=str(meta.get("uid", "")))


def _cond(status: Mapping[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == type_), {})


def _short(text: str) -> str:
    return text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS - 1] + "…"


def run_events(body: Mapping[str, Any]) -> list[Event]:
    """A finished run's events: RunFinished, and Regression when it regressed against its
    baseline (its Regressed condition)."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    spec = body.get("spec") or {}
    phase, done = status.get("phase"), status.get("completionTime")
    if phase not in FINISHED or not done:
        return []
    ref = _ref("BenchmarkRun", meta)
    succeeded, regressed = _cond(status, Condition.succeeded), _cond(status, Condition.regressed)
    details = {"phase": phase, "reason": succeeded.get("reason", ""),
               "message": succeeded.get("message", ""), "board": status.get("board") or "",
               "plan": spec.get("plan") or "(inline)",
               "deviceType": (spec.get("selector") or {}).get("deviceType") or "",
               "startTime": status.get("startTime") or "", "completionTime": done,
               "results": status.get("results") or {}, "artifacts": status.get("artifacts") or [],
               "baseline": spec.get("baseline") or ""}
    where = f" on {details['board']}" if details["board"] else ""
    out = [Event(kind=EventKind.run_finished, key=f"{EventKind.run_finished}/{ref.uid}",
                 namespace=ref.namespace, occurredAt=done, object=ref, details=details,
                 summary=_short(f"run {ref.namespace}/{ref.name} {phase}{where}: "
                                f"{details['reason']}: {details['message']}"))]
    if regressed.get("status") == "True":
        out.append(Event(kind=EventKind.regression, key=f"{EventKind.regression}/{ref.uid}",
                         namespace=ref.namespace, occurredAt=done, object=ref,
                         details={**details, "regression": regressed.get("message", "")},
                         summary=_short(f"run {ref.namespace}/{ref.name} regressed against "
                                        f"{details['baseline'] or 'its baseline'}: "
                                        f"{regressed.get('message', '')}")))
    return out


def campaign_event(body: Mapping[str, Any]) -> Event | None:
    """A campaign that has ended (published, or could not publish): CampaignFinished, with its
    guide, its changes against the previous release and their verdict."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    cond = _cond(status, Condition.succeeded)
    if cond.get("status") not in ("True", "False") or not cond.get("lastTransitionTime"):
        return None
    ref = _ref("BenchmarkCampaign", meta)
    regressed = _cond(status, Condition.regressed)
    release = (body.get("spec") or {}).get("release", "")
    details = {"release": release, "phase": status.get("phase") or "",
               "reason": cond.get("reason", ""), "message": cond.get("message", ""),
               "done": status.get("done") or "", "guide": status.get("guide") or {},
               "changes": status.get("changes") or {}, "previous": status.get("previous") or "",
               "regressed": regressed.get("status", ""),
               "regression": regressed.get("message", "")}
    verdict = f"; {regressed['message']}" if regressed.get("status") == "True" else ""
    return Event(kind=EventKind.campaign_finished,
                 key=f"{EventKind.campaign_finished}/{ref.uid}/{meta.get('generation', 1)}",
                 namespace=ref.namespace, occurredAt=cond["lastTransitionTime"], object=ref,
                 details=details,
                 summary=_short(f"campaign {ref.namespace}/{ref.name} (release {release}) "
                                f"{cond.get('reason', '')}: {cond.get('message', '')}{verdict}"))


def lease_event(kind: EventKind, meta: Mapping[str, Any], status: Mapping[str, Any],
                at: str, message: str) -> Event:
    """LeaseGranted (once per grant), LeaseEnding (once per expiry time: an extension warns
    again), LeaseEnded (once)."""
    ref = _ref("BoardLease", meta)
    key = {EventKind.lease_granted: f"{kind}/{ref.uid}/{status.get('grantedAt', '')}",
           EventKind.lease_ending: f"{kind}/{ref.uid}/{status.get('expiresAt', '')}",
           }.get(kind, f"{kind}/{ref.uid}")
    details = {"place": status.get("place") or "", "expiresAt": status.get("expiresAt") or "",
               "grantedAt": status.get("grantedAt") or "", "message": message}
    return Event(kind=kind, key=key, namespace=ref.namespace, occurredAt=at, object=ref,
                 details=details,
                 summary=_short(f"lease {ref.namespace}/{ref.name}: {message}"))


def change_point_event(namespace: str, run: str, run_uid: str, series: Mapping[str, str],
                       at: str, message: str, details: Mapping[str, Any]) -> Event:
    ref = ObjectRef(kind="BenchmarkRun", name=run, namespace=namespace, uid=run_uid)
    key = "/".join([EventKind.change_point, namespace, series.get("metric", ""),
                    series.get("deviceType", ""), series.get("plan", ""), run_uid])
    return Event(kind=EventKind.change_point, key=key, namespace=namespace, occurredAt=at,
                 object=ref, details={**series, **details, "message": message},
                 summary=_short(f"change point at run {namespace}/{run}: {message}"))


def board_event(kind: EventKind, board: str, at: str, message: str) -> Event:
    """BoardQuarantined or BoardBack (the lab admin's): once per quarantine and return."""
    return Event(kind=kind, key=f"{kind}/{board}/{at}", namespace="", occurredAt=at,
                 object=ObjectRef(kind="Board", name=board), details={"message": message},
                 summary=_short(f"board {board}: {message}"))


# -- what a receiver gets ------------------------------------------------------------------------
def body_of(event: Event, sub: Subscription, target: Target) -> NotificationBody:
    return NotificationBody(**event.model_dump(), id=delivery_id(sub.uid, event.key, target),
                            notification=sub.key)


def webhook_payload(body: NotificationBody, fmt: WebhookFormat) -> bytes:
    if fmt == WebhookFormat.slack:
        return json.dumps({"text": f"[benchfarm] {body.summary}"}).encode()
    return body.model_dump_json().encode()


def sign(key: bytes, timestamp: int, payload: bytes) -> str:
    """X-Benchfarm-Signature: HMAC-SHA256 over `<timestamp>.<body>`, so a captured delivery
    replayed later fails a receiver that checks the timestamp's age."""
    mac = hmac.new(key, str(timestamp).encode() + b"." + payload, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def email_text(body: NotificationBody) -> tuple[str, str]:
    """(subject, plain text) of an e-mail."""
    lines = [body.summary, "", f"event: {body.kind}", f"when: {body.occurredAt}",
             f"what: {body.object.kind} {'/'.join(p for p in (body.object.namespace, body.object.name) if p)}"]
    for k, v in body.details.items():
        if v in ("", [], {}, None):
            continue
        shown = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
        lines.append(f"{k}: {shown}")
    lines += ["", f"Notification {body.notification}; delivery {body.id}"]
    subject = f"[benchfarm] {body.summary}".replace("\r", " ").replace("\n", " ")
    return subject[:200], "\n".join(lines) + "\n"


# -- retries -------------------------------------------------------------------------------------
def backoff(attempts: int, delivery: str, settings: NotifySettings) -> float:
    """Seconds before the next attempt after `attempts` failed ones: doubling from
    backoff_seconds up to backoff_max_seconds, less up to a tenth, by the delivery's id (many
    deliveries to a receiver that comes back do not all retry at the same second)."""
    base = min(settings.backoff_max_seconds,
               settings.backoff_seconds * 2.0 ** min(max(attempts - 1, 0), 32))
    spread = int(hashlib.sha256(f"{delivery}/{attempts}".encode()).hexdigest()[:4], 16) / 0xFFFF
    return base * (1 - spread / 10)


def worth_keeping(event: Event, now: datetime, settings: NotifySettings) -> bool:
    """An event older than what the outbox keeps is not delivered (seen again after a restart,
    its old delivery may be gone from the outbox, and it would go out twice)."""
    return (now - parse_time(event.occurredAt)).total_seconds() < settings.keep_seconds


def matches(subs: Iterable[Subscription], event: Event, admin_namespace: str
            ) -> list[Subscription]:
    return [s for s in subs if subscribed(s, event, admin_namespace)]


def now_utc() -> datetime:
    return datetime.now(UTC)


# -- the outbox as a Notification's status shows it ----------------------------------------------
def refused(row: Mapping[str, Any]) -> bool:
    """A delivery the outbox keeps as refused (over maxDeliveriesPerHour): done, never tried."""
    return row.get("failed") is not None and not row.get("attempts")


def _delivery_state(row: Mapping[str, Any]) -> DeliveryState:
    if row.get("delivered") is not None:
        return DeliveryState.delivered
    if refused(row):
        return DeliveryState.refused
    if row.get("failed") is not None:
        return DeliveryState.failed
    return DeliveryState.retrying


def delivery(row: Mapping[str, Any]) -> Delivery:
    """One outbox row as status.deliveries lists it."""
    at = row.get("last_attempt") or row.get("created")
    return Delivery(id=row["id"], event=row["event_kind"], subject=row["subject"],
                    target=row["target"], state=_delivery_state(row), attempts=row["attempts"],
                    time=at.strftime("%Y-%m-%dT%H:%M:%SZ") if at else "",
                    error=row.get("last_error") or "")


def delivered_condition(rows: list[dict[str, Any]]) -> tuple[str, NotificationReason, str]:
    """The Delivered condition from the latest deliveries (newest first): False while the
    newest event's was refused (over maxDeliveriesPerHour) or the latest attempt of any of them
    failed, True once the latest all went through."""
    newest = max(rows, key=lambda r: (r.get("created") is not None, r.get("created") or 0),
                 default=None)
    if newest is not None and refused(newest):
        return ("False", NotificationReason.rate_limited, str(newest.get("last_error") or ""))
    tried = [r for r in rows if r.get("attempts")]
    if not tried:
        return ("Unknown", NotificationReason.waiting,
                "nothing delivered yet" if not rows else f"{len(rows)} delivery(ies) queued")
    failing = [r for r in tried if r.get("delivered") is None]
    if failing:
        r = failing[0]
        reason = NotificationReason.gave_up if r.get("failed") is not None \
            else NotificationReason.retrying
        verb = "given up after" if reason == NotificationReason.gave_up else "failing, tried"
        return ("False", reason, f"delivery {r['id']} ({r['event_kind']} {r['subject']} by "
                                 f"{r['target']}) {verb} {r['attempts']} attempt(s): "
                                 f"{r.get('last_error') or '?'}")
    r = tried[0]
    return ("True", NotificationReason.delivered,
            f"latest: {r['event_kind']} {r['subject']} by {r['target']} (delivery {r['id']})")
