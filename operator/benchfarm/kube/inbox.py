"""What the operator hands the notifier, and which Notifications each event goes to.

kopf feeds every Notification to `observe` (the subscriptions in force, per namespace); the
operator's parts hand over what happened (`emit`: a lease granted, ending or ended, a board
quarantined or back, a change point; and `run_seen`/`campaign_seen`: a finished run's or
campaign's object, whose events are derived here, `core.notify`). Those calls only append to a
queue under the notifier's condition and return: nobody waits for the database, a receiver or
a mail server. An event of a namespace where nobody subscribed is not even queued.

The notifier's thread takes the queue's items in order and asks `rows` for their outbox rows:
one per event worth keeping, subscription in force that matches it (`core.notify.matches`) and
target. Its state is the notifier's, under the notifier's one condition (`cond`).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

from pydantic import ValidationError

from ..api.notifications import Event, NotificationReason, NotificationSpec
from ..core import notify as n

log = logging.getLogger("benchfarm.notify")


class Marks(Protocol):
    """What the inbox asks of the Notifications' statuses (`kube.notification_status`); each
    called under the condition's lock."""

    def mark(self, uid: str) -> None: ...

    def seen(self, uid: str, conditions: list[dict[str, Any]]) -> None: ...

    def drop(self, uid: str) -> None: ...

    def problem(self, sub: n.Subscription) -> tuple[NotificationReason, str] | None: ...


class Inbox:
    def __init__(self, cond: threading.Condition, statuses: Marks, settings: n.NotifySettings,
                 admin_namespace: str) -> None:
        """`cond`: the notifier's condition, which guards this state too."""
        self.cond = cond
        self.statuses = statuses
        self.settings = settings
        self.admin_namespace = admin_namespace
        self.subs: dict[str, n.Subscription] = {}          # uid -> subscription
        self.by_namespace: dict[str, int] = {}              # namespace -> subscriptions
        self.items: deque[tuple[str, Any]] = deque()         # ("event", Event) or ("run", body)…
        self.forgotten: list[str] = []                       # deleted Notifications' uids

    # -- what the operator hands over (any thread; never waits) --------------------------------
    def observe(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """A Notification was added, changed or deleted (kopf's watch)."""
        meta = body.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        with self.cond:
            old = self.subs.pop(uid, None)
            if old is not None:
                self.by_namespace[old.namespace] -= 1
            if event_type == "DELETED" or meta.get("deletionTimestamp"):
                self.forgotten.append(uid)
                self.statuses.drop(uid)
                self.cond.notify()
                return
            try:
                spec = NotificationSpec(**(body.get("spec") or {}))
            except ValidationError as exc:     # the CRD's schema refuses what this would
                log.warning("%s/%s: not a Notification benchfarm reads: %s",
                            meta.get("namespace"), meta.get("name"), exc)
                return
            sub = n.Subscription(str(meta.get("namespace", "")), str(meta.get("name", "")), uid,
                                 str(meta.get("creationTimestamp") or n.now_utc().isoformat()),
                                 int(meta.get("generation") or 1), spec)
            self.subs[uid] = sub
            self.by_namespace[sub.namespace] = self.by_namespace.get(sub.namespace, 0) + 1
            conditions = list((body.get("status") or {}).get("conditions") or [])
            self.statuses.seen(uid, conditions)
            if old is None or old.generation != sub.generation or \
                    not conditions:
                self.statuses.mark(uid)

    def policy_changed(self) -> None:
        """The LabPolicy changed: every Notification's Ready condition is judged again."""
        with self.cond:
            for uid in self.subs:
                self.statuses.mark(uid)

    def emit(self, event: Event) -> None:
        if self._wanted(event.namespace):
            self._push(("event", event))

    def run_seen(self, body: Mapping[str, Any]) -> None:
        """A finished run (seen at every watch event and every start: its events have keys)."""
        if self._wanted(str((body.get("metadata") or {}).get("namespace", ""))):
            self._push(("run", body))

    def campaign_seen(self, body: Mapping[str, Any]) -> None:
        if self._wanted(str((body.get("metadata") or {}).get("namespace", ""))):
            self._push(("campaign", body))

    def _wanted(self, namespace: str) -> bool:
        """Has anyone subscribed in the event's namespace (a board event: the admin's)?"""
        return bool(self.by_namespace.get(namespace or self.admin_namespace))

    def _push(self, item: tuple[str, Any]) -> None:
        with self.cond:
            self.items.append(item)
            self.cond.notify()

    # -- the matching (the notifier's thread) ---------------------------------------------------
    def rows(self, subs: list[n.Subscription], kind: str, item: Any, now: datetime
             ) -> list[dict[str, Any]]:
        """The outbox rows of an item of the queue: one per event, subscription in force and
        target."""
        rows: list[dict[str, Any]] = []
        for event in _events(kind, item):
            if not n.worth_keeping(event, now, self.settings):
                continue
            for sub in n.matches(subs, event, self.admin_namespace):
                if self.statuses.problem(sub) is not None:
                    continue
                for target in sub.targets(event.kind):
                    body = n.body_of(event, sub, target)
                    rows.append({
                        "id": body.id, "namespace": sub.namespace, "notification": sub.name,
                        "notification_uid": sub.uid, "target": target.value,
                        "event_kind": event.kind.value, "subject": _subject(event),
                        "body": body.model_dump(mode="json"), "created": now,
                        "occurred": n.parse_time(event.occurredAt), "next_attempt": now})
        return rows


def _events(kind: str, item: Any) -> list[Event]:
    if kind == "run":
        return n.run_events(item)
    if kind == "campaign":
        event = n.campaign_event(item)
        return [event] if event is not None else []
    return [item]


def _subject(event: Event) -> str:
    ref = event.object
    return f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
