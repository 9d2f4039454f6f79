"""What the operator hands the notifier, and which Notifications each event goes to.

kopf feeds every Notification to `observe` (the subscriptions in force, per namespace); the
operator's parts hand over what happened (`emit`: a lease granted, ending or ended, a board
quarantined or back, a change point; and `run_seen`/`campaign_seen`: a finished run's or
campaign's object, whose events are derived here, `core.notifications.events`). Those calls only append to a
queue under the notifier's condition and return: nobody waits for the database, a receiver or
a mail server. An event of a namespace where nobody subscribed is not even queued.

The Notifications are kept by namespace, and each namespace's are judged together when they
change or the LabPolicy does (`core.notifications.rules.judge`: which are in force, under the namespace's
caps); an event is matched against its own namespace's Notifications in force only (a board's,
against the lab admin's), so what it costs is what that namespace subscribed, whatever the
others did.

The notifier's thread takes the queue's items in order and asks `rows` for their outbox rows:
one per event worth keeping, subscription in force that matches it (`core.notifications.rules.matches`) and
target. Its state is the notifier's, under the notifier's one condition (`cond`).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from benchfarm.api.notifications import Event, NotificationSpec, NotificationStatus
from benchfarm.core.conditions import as_written
from benchfarm.core.notifications import rules as n
from benchfarm.core.notifications.bodies import body_of
from benchfarm.core.notifications.events import bisection_event, campaign_event, run_events
from benchfarm.core.notifications.retry import NotifySettings, worth_keeping
from benchfarm.operator.notifications.status import Problem, Statuses

log = logging.getLogger("benchfarm.notify")


class Inbox:
    def __init__(self, cond: threading.Condition, statuses: Statuses, settings: NotifySettings,
                 admin_namespace: str) -> None:
        """`cond`: the notifier's condition, which guards this state too."""
        self.cond = cond
        self.statuses = statuses
        self.settings = settings
        self.admin_namespace = admin_namespace
        self.subs: dict[str, n.Subscription] = {}          # uid -> subscription
        self.by_namespace: dict[str, dict[str, n.Subscription]] = {}   # namespace -> uid -> sub
        # namespace -> (uid -> why not in force, the subscriptions in force): judged again when
        # the namespace's Notifications changed (`stale`) or the LabPolicy did
        self.verdicts: dict[str, tuple[dict[str, Problem], list[n.Subscription]]] = {}
        self.stale: set[str] = set()
        self.items: deque[tuple[str, Any]] = deque()         # ("event", Event) or ("run", body)…
        self.forgotten: list[str] = []                       # deleted Notifications' uids

    # -- what the operator hands over (any thread; never waits) --------------------------------
    def observe(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """A Notification was added, changed or deleted (kopf's watch)."""
        meta = body.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        with self.cond:
            old = self.subs.pop(uid, None)
            if event_type == "DELETED" or meta.get("deletionTimestamp"):
                if old is not None:
                    self._leave(old)
                self.forgotten.append(uid)
                self.statuses.drop(uid)
                self.cond.notify()
                return
            try:
                spec = NotificationSpec(**(body.get("spec") or {}))
            except ValidationError as exc:     # the CRD's schema refuses what this would
                if old is not None:
                    self._leave(old)
                log.warning("%s/%s: not a Notification benchfarm reads: %s",
                            meta.get("namespace"), meta.get("name"), exc)
                return
            sub = n.Subscription(str(meta.get("namespace", "")), str(meta.get("name", "")), uid,
                                 str(meta.get("creationTimestamp") or n.now_utc().isoformat()),
                                 int(meta.get("generation") or 1), spec)
            self.subs[uid] = sub
            self.by_namespace.setdefault(sub.namespace, {})[uid] = sub
            if old is None or old.generation != sub.generation:
                self.stale.add(sub.namespace)
            conditions = as_written(NotificationStatus.of(body.get("status")).conditions)
            self.statuses.seen(uid, conditions)
            if old is None or old.generation != sub.generation or \
                    not conditions:
                self.statuses.mark(uid)

    def _leave(self, old: n.Subscription) -> None:
        """(Under the lock) a Notification went: its namespace is judged again."""
        mine = self.by_namespace.get(old.namespace, {})
        mine.pop(old.uid, None)
        self.stale.add(old.namespace)
        if not mine:
            self.by_namespace.pop(old.namespace, None)
            self.verdicts.pop(old.namespace, None)
            self.stale.discard(old.namespace)

    def policy_changed(self) -> None:
        """The LabPolicy changed: every Notification's Ready condition is judged again."""
        with self.cond:
            self.stale.update(self.by_namespace)
            for uid in self.subs:
                self.statuses.mark(uid)

    # -- which are in force (any thread, under the lock) ----------------------------------------
    def problem(self, sub: n.Subscription) -> Problem | None:
        """Why this Notification is not in force, or None."""
        with self.cond:
            return self._judged(sub.namespace)[0].get(sub.uid)

    def in_force(self, namespace: str) -> list[n.Subscription]:
        """The namespace's Notifications in force (one's own namespace's cost only)."""
        with self.cond:
            return self._judged(namespace)[1]

    def judge_stale(self) -> None:
        """(The notifier's thread) the namespaces whose Notifications changed, judged again
        now, not when one of theirs is next asked about: a Notification another one's deletion
        put in force (or a new older one put out) has its status written."""
        with self.cond:
            for namespace in list(self.stale):
                self._judged(namespace)

    def _judged(self, namespace: str) -> tuple[dict[str, Problem], list[n.Subscription]]:
        """The namespace's verdicts, judged again when stale; a Notification whose verdict
        changed (another one went, the policy changed) has its status written again."""
        if namespace not in self.stale and namespace in self.verdicts:
            return self.verdicts[namespace]
        mine = self.by_namespace.get(namespace, {})
        problems = self.statuses.judge(namespace, list(mine.values()))
        before = self.verdicts.get(namespace, ({}, []))[0]
        for uid in mine:
            if problems.get(uid) != before.get(uid):
                self.statuses.mark(uid)
        verdict = (problems, [s for uid, s in mine.items() if uid not in problems])
        self.stale.discard(namespace)
        if mine:
            self.verdicts[namespace] = verdict
        return verdict

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

    def bisection_seen(self, body: Mapping[str, Any]) -> None:
        if self._wanted(str((body.get("metadata") or {}).get("namespace", ""))):
            self._push(("bisection", body))

    def _wanted(self, namespace: str) -> bool:
        """Has anyone subscribed in the event's namespace (a board event: the admin's)?"""
        return bool(self.by_namespace.get(namespace or self.admin_namespace))   # no lock: a read

    def _push(self, item: tuple[str, Any]) -> None:
        with self.cond:
            self.items.append(item)
            self.cond.notify()

    # -- the matching (the notifier's thread) ---------------------------------------------------
    def rows(self, kind: str, item: Any, now: datetime) -> list[dict[str, Any]]:
        """The outbox rows of an item of the queue: one per event, subscription in force of the
        event's namespace (a board's: the lab admin's) that matches it, and target."""
        rows: list[dict[str, Any]] = []
        for event in _events(kind, item):
            if not worth_keeping(event, now, self.settings):
                continue
            subs = self.in_force(event.namespace or self.admin_namespace)
            for sub in n.matches(subs, event, self.admin_namespace):
                for target in sub.targets(event.kind):
                    body = body_of(event, sub, target)
                    rows.append({
                        "id": body.id, "namespace": sub.namespace, "notification": sub.name,
                        "notification_uid": sub.uid, "target": target.value,
                        "event_kind": event.kind.value, "subject": _subject(event),
                        "body": body.model_dump(mode="json"), "created": now,
                        "occurred": n.parse_time(event.occurredAt), "next_attempt": now})
        return rows


def _events(kind: str, item: Any) -> list[Event]:
    if kind == "run":
        return run_events(item)
    if kind in ("campaign", "bisection"):
        event = campaign_event(item) if kind == "campaign" else bisection_event(item)
        return [event] if event is not None else []
    return [item]


def _subject(event: Event) -> str:
    ref = event.object
    return f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
