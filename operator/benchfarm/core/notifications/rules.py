"""Notifications, decided: who is told of what. Pure: the notifier
(`operator.notifications.notifier`) feeds it the objects it sees and does the I/O (the outbox,
HTTP, SMTP).

- A subscription sees only its own namespace's events, and only those that happened after it
  was created; board events only in the lab admin's namespace (the operator's).
- A delivery's id is derived from the subscription, the event and the target: a retry, a
  restart, the same event seen twice, all carry the same id, on which a receiver dedupes.
- An e-mail recipient's domain is on the namespace's emailDomains; a webhook's URL is one the
  namespace's webhooks may reach (`webhooks`).
- What a namespace may ask of the lab is capped by its LabPolicy (`notifications`): the oldest
  maxNotifications of its Notifications are in force, their distinct recipients at most
  maxRecipients, and at most maxDeliveriesPerHour deliveries are queued for it in an hour
  (`judge`, `rate_limited`). Each namespace's Notifications are judged and matched apart, so an
  event costs what its own namespace's subscriptions cost.
- Deliveries take turns by namespace (`take_turns`): one namespace's slow receiver holds one
  delivery thread at a time, for one delivery's deadline at most.

The events are derived from objects in `events`; what a receiver gets is `bodies`'s, when a
failed delivery is tried again `retry`'s, where a webhook may point `webhooks`'s, and what a
Notification's status shows of the outbox `delivered`'s.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from benchfarm.api.labpolicy import NamespacePolicy
from benchfarm.api.notifications import (
    KCIDB_EVENTS,
    LAB_ADMIN_EVENTS,
    Event,
    EventKind,
    NotificationReason,
    NotificationSpec,
    Target,
)
from benchfarm.core.notifications.webhooks import WebhookReach


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


def matches(subs: Iterable[Subscription], event: Event, admin_namespace: str
            ) -> list[Subscription]:
    return [s for s in subs if subscribed(s, event, admin_namespace)]


def now_utc() -> datetime:
    return datetime.now(UTC)
