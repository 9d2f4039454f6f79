"""A Notification's status, written back: whether it is in force and how its deliveries went.

The notifier (`operator.notifications.notifier`) marks a Notification whose status is to be written (it was added
or changed, the LabPolicy changed, one of its deliveries was queued, made or refused); its
thread writes the marked ones' statuses: the `Ready` condition (in force, or why not: its
namespace's Notifications judged together, `core.notifications.rules.judge`, which the matching of events
asks too), the `Delivered` condition (`RateLimited` while its newest event's delivery is one
refused over the namespace's maxDeliveriesPerHour), its latest deliveries and their counts from
the outbox. A Notification's status is written at most every STATUS_EVERY seconds; one whose
write met an outage is marked again.

Its state is the notifier's, under the notifier's one condition (`cond`): `mark`, `seen` and
`drop` are called with it held, like the notifier's own methods that call them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from benchfarm.api.notifications import DELIVERIES_SHOWN, NotificationReason
from benchfarm.core.conditions import set_condition
from benchfarm.core.notifications import rules as n
from benchfarm.core.notifications.delivered import delivered_condition, delivery
from benchfarm.errors import Outage
from benchfarm.history.outbox import Outbox
from benchfarm.operator.notifications.deliveries import Sender

PLURAL = "notifications"
STATUS_EVERY = 2.0          # seconds, at least, between two status writes of one Notification
Problem = tuple[NotificationReason, str]    # why a Notification is not in force


class StatusKube(Protocol):
    """What a status write asks of the Kubernetes API (`kubeapi.client.Kube` is one)."""

    def patch_custom(self, plural: str, namespace: str, name: str, patch: dict[str, Any],
                     *, status: bool = False) -> bool: ...


class Statuses:
    def __init__(self, cond: threading.Condition, outbox: Outbox | None, kube: StatusKube,
                 sender: Sender, admin_namespace: str, clock: Callable[[], float]) -> None:
        """`cond`: the notifier's condition, which guards this state too."""
        self.cond = cond
        self.outbox = outbox
        self.kube = kube
        self.sender = sender
        self.admin_namespace = admin_namespace
        self.clock = clock
        self.conditions: dict[str, list[dict[str, Any]]] = {}   # uid -> as last written
        self.dirty: dict[str, float] = {}                    # uid -> when its status is due
        self.written_at: dict[str, float] = {}

    def judge(self, namespace: str, subs: Sequence[n.Subscription]) -> dict[str, Problem]:
        """Why each of the namespace's Notifications is not in force (`core.notifications.rules.judge`),
        under the LabPolicy in force and the lab's SMTP server and outbox."""
        return n.judge(subs, self.sender.policy().for_namespace(namespace), self.admin_namespace,
                       self.sender.reach(namespace), self.sender.smtp is not None,
                       self.outbox is not None)

    # -- what the notifier marks (under the condition's lock) -----------------------------------
    def mark(self, uid: str) -> None:
        """(Under the condition's lock) the Notification's status is to be written."""
        self.dirty.setdefault(uid, max(self.clock(), self.written_at.get(uid, 0.0) +
                                       STATUS_EVERY))
        self.cond.notify()

    def seen(self, uid: str, conditions: list[dict[str, Any]]) -> None:
        """(Under the condition's lock) the Notification's conditions, as its object has them."""
        self.conditions[uid] = conditions

    def drop(self, uid: str) -> None:
        """(Under the condition's lock) a deleted Notification: no status of it to write."""
        self.dirty.pop(uid, None)
        self.written_at.pop(uid, None)
        self.conditions.pop(uid, None)

    # -- the writes (the notifier's thread) -----------------------------------------------------
    def write_due(self, subs: Mapping[str, n.Subscription],
                  problem: Callable[[n.Subscription], tuple[NotificationReason, str] | None]
                  ) -> None:
        """The due statuses of the Notifications (`subs`, read under the lock; `problem`: why
        one is not in force, `operator.notifications.inbox`)."""
        now = self.clock()
        with self.cond:
            due = [uid for uid, at in self.dirty.items() if at <= now]
        for uid in due:
            with self.cond:
                sub = subs.get(uid)
                self.dirty.pop(uid, None)
            if sub is None:
                continue
            try:
                self._write(sub, problem(sub))
            except Outage:
                with self.cond:
                    self.mark(uid)
                raise
            with self.cond:
                self.written_at[uid] = self.clock()

    def _write(self, sub: n.Subscription, problem: tuple[NotificationReason, str] | None
               ) -> None:
        rows = self.outbox.recent(sub.uid, DELIVERIES_SHOWN) if self.outbox is not None else []
        counts = self.outbox.counts(sub.uid) if self.outbox is not None else {}
        conditions = self.conditions.get(sub.uid, [])
        if problem is not None:
            conditions = set_condition(conditions, "Ready", "False", problem[0], problem[1],
                                       sub.generation)
        else:
            targets = " and ".join(t.value for t in sub.targets())
            conditions = set_condition(
                conditions, "Ready", "True", NotificationReason.accepted,
                f"{', '.join(sub.spec.events)} of namespace {sub.namespace} go to {targets}",
                sub.generation)
        conditions = set_condition(conditions, "Delivered", *delivered_condition(rows),
                                   sub.generation)
        status = {"conditions": conditions, "deliveries": [
                      delivery(r).model_dump(mode="json") for r in rows],
                  "delivered": counts.get("delivered", 0), "pending": counts.get("pending", 0),
                  "failed": counts.get("failed", 0), "refused": counts.get("refused", 0),
                  "observedGeneration": sub.generation}
        if self.kube.patch_custom(PLURAL, sub.namespace, sub.name, {"status": status},
                                  status=True):
            self.conditions[sub.uid] = conditions
