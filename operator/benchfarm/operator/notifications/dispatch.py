"""The notifier's outbox work: events in as deliveries, due deliveries out to their attempts.

On the notifier's thread, `step` writes the inbox's events into the outbox (`history.outbox`,
one delivery per target: the rows the inbox matched; those past the namespace's LabPolicy
maxDeliveriesPerHour are written as refused, never attempted, and their Notifications say so),
drops a deleted
Notification's pending deliveries, hands the due deliveries to the delivery threads and prunes
done deliveries.

The delivery threads are shared by every namespace, so they are handed out fairly: a namespace
has at most one delivery in flight, and the namespaces with deliveries due take turns, the one
served longest ago first (`core.notifications.rules.take_turns`). A receiver that is slow or trickles holds
one thread for one attempt's deadline at most (`notify.deadline`), and its namespace's other
deliveries wait behind it, not another namespace's.

On a delivery thread, `operator.notifications.deliveries.Sender` makes one attempt and its outcome is recorded here: a
failed attempt is tried again with exponential backoff (`core.notifications.retry.backoff`) until it
succeeds or its event is older than the give-up time; each delivery keeps its id throughout
(the receiver dedupes on it). An outage of the database leaves the events queued and the
deliveries due, in the outbox.

Its state is the notifier's, under the notifier's one condition (`cond`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from benchfarm.api.notifications import NotificationBody, Target
from benchfarm.core.notifications import rules as n
from benchfarm.core.notifications.retry import NotifySettings, backoff
from benchfarm.errors import Outage
from benchfarm.history.outbox import Outbox
from benchfarm.notify import DeliveryFailed
from benchfarm.operator.notifications.deliveries import Sender
from benchfarm.operator.notifications.inbox import Inbox
from benchfarm.operator.notifications.status import Statuses
from benchfarm.operator.state import metrics
from benchfarm.operator.state.pools import Workers

log = logging.getLogger("benchfarm.notify")
DELIVERY_THREADS = 8        # deliveries in flight at once, one per namespace (each mostly
#                             waits for its receiver, for one attempt's deadline at most)
HOUR = timedelta(hours=1)   # maxDeliveriesPerHour's window
PRUNE_EVERY = 3600.0        # seconds between two prunings of done deliveries
IDLE = 30.0                 # seconds the thread sleeps with nothing due (new work wakes it)


class Dispatcher:
    def __init__(self, cond: threading.Condition, outbox: Outbox | None, inbox: Inbox,
                 statuses: Statuses, sender: Sender, settings: NotifySettings,
                 clock: Callable[[], float]) -> None:
        """`cond`: the notifier's condition, which guards this state too."""
        self.cond = cond
        self.outbox = outbox
        self.inbox = inbox
        self.statuses = statuses
        self.sender = sender
        self.settings = settings
        self.clock = clock
        self.in_flight: dict[str, str] = {}                  # delivery id -> its namespace
        self.turns: dict[str, int] = {}                      # namespace -> when last served
        self.turn = 0
        self.wake_at = 0.0                                   # monotonic: the next due delivery
        self.pruned_at = 0.0
        self.pool = Workers(max_workers=DELIVERY_THREADS, thread_name_prefix="notify-delivery")

    # -- the notifier's thread ----------------------------------------------------------------
    def step(self) -> None:
        if self.outbox is not None:
            self.outbox.db.ensure_migrated()
            self._enqueue()
            self._forget()
            self._dispatch()
            self._prune()
        else:                     # nothing is ever due: only statuses wake the thread
            self.wake_at = self.clock() + IDLE

    def _enqueue(self) -> None:
        """The events waiting here into the outbox (they leave the queue once written)."""
        assert self.outbox is not None
        while True:
            with self.cond:
                if not self.inbox.items:
                    return
                kind, item = self.inbox.items[0]
            now = n.now_utc()
            try:
                rows = self.inbox.rows(kind, item, now)
            except Exception:       # an object benchfarm cannot read must not stop the rest
                metrics.bug(log, "notifications: a %s event passed over", kind)
                with self.cond:
                    self.inbox.items.popleft()
                continue
            rows = self._within_rate(rows, now)     # an Outage leaves the event queued
            new = self.outbox.add(rows)
            with self.cond:
                self.inbox.items.popleft()
                for row in rows:
                    if row["id"] in new:
                        self.statuses.mark(str(row["notification_uid"]))
                if new:
                    self.wake_at = 0.0
            refused = [r for r in rows if r["id"] in new and r.get("failed") is not None]
            metrics.NOTIFICATIONS.labels("queued").inc(len(new) - len(refused))
            metrics.NOTIFICATIONS.labels("refused").inc(len(refused))
            for row in rows:
                if row["id"] in new:
                    log.info("%s/%s: %s %s queued for %s (delivery %s)", row["namespace"],
                             row["notification"], row["event_kind"], row["subject"],
                             row["target"], row["id"])

    def _within_rate(self, rows: list[dict[str, Any]], now: datetime) -> list[dict[str, Any]]:
        """The rows to write: of those not in the outbox yet (seen again after a restart, a
        delivery is not new), each namespace's as many as its maxDeliveriesPerHour leaves room
        for in the hour; the rest as refused (done, never attempted, why in last_error)."""
        assert self.outbox is not None
        if not rows:
            return rows
        known = self.outbox.existing([r["id"] for r in rows])
        keep = [r for r in rows if r["id"] in known]
        room: dict[str, int] = {}
        for row in rows:
            if row["id"] in known:
                continue
            ns = str(row["namespace"])
            cap = self.sender.policy().for_namespace(ns).notifications.maxDeliveriesPerHour
            if ns not in room:
                room[ns] = cap - self.outbox.queued_since(ns, now - HOUR)
            if room[ns] > 0:
                room[ns] -= 1
                keep.append(row)
            else:
                keep.append({**row, "body": {}, "failed": now, "last_error": n.rate_limited(
                    ns, cap, str(row["event_kind"]), str(row["subject"]))})
                log.info("%s/%s: %s %s refused for %s: the namespace's maxDeliveriesPerHour "
                         "(%d) is reached", ns, row["notification"], row["event_kind"],
                         row["subject"], row["target"], cap)
        return keep

    def _forget(self) -> None:
        assert self.outbox is not None
        with self.cond:
            gone, self.inbox.forgotten = self.inbox.forgotten, []
        for i, uid in enumerate(gone):
            try:
                dropped = self.outbox.forget(uid)
            except Outage:
                with self.cond:
                    self.inbox.forgotten.extend(gone[i:])
                raise
            if dropped:
                log.info("a deleted Notification's %d pending deliveries dropped", dropped)

    def _dispatch(self) -> None:
        """Hand due deliveries to the idle delivery threads, one per namespace without one in
        flight, the namespaces in turn; note when the next is due (a delivery that ends wakes
        the thread at once)."""
        assert self.outbox is not None
        with self.cond:
            if self.clock() < self.wake_at:
                return
            free = DELIVERY_THREADS - len(self.in_flight)
            busy = set(self.in_flight.values())
            self.wake_at = self.clock() + IDLE
        if free <= 0:
            return
        try:
            heads = self.outbox.due_heads(n.now_utc(), sorted(busy))
            going = n.take_turns(heads.keys(), self.turns, free)
            rows = self.outbox.rows([heads[ns] for ns in going])
        except Outage:
            with self.cond:
                self.wake_at = 0.0              # again once the database is back
            raise
        for row in rows:
            with self.cond:
                self.in_flight[row["id"]] = row["namespace"]
                self.turn += 1
                self.turns[row["namespace"]] = self.turn
            self.pool.submit(self._deliver, row)
        if len(going) < len(heads):
            return              # every thread is busy: the next delivery to end wakes us
        try:
            nxt = self.outbox.next_due(sorted(busy | set(going)))
        except Outage:
            with self.cond:
                self.wake_at = 0.0
            raise
        if nxt is not None:
            with self.cond:
                self.wake_at = min(self.wake_at, self.clock() +
                                   max(0.0, (nxt - n.now_utc()).total_seconds()))

    def _prune(self) -> None:
        assert self.outbox is not None
        if self.clock() - self.pruned_at < PRUNE_EVERY:
            return
        self.pruned_at = self.clock()
        pruned = self.outbox.prune(n.now_utc() - timedelta(seconds=self.settings.keep_seconds))
        if pruned:
            log.info("%d finished deliveries pruned from the outbox", pruned)

    # -- one delivery (a delivery thread) -----------------------------------------------------
    def _deliver(self, row: dict[str, Any]) -> None:
        assert self.outbox is not None
        uid, id_ = row["notification_uid"], row["id"]
        try:
            now = n.now_utc()
            try:
                with self.cond:
                    sub = self.inbox.subs.get(uid)
                if sub is None:
                    raise DeliveryFailed("its Notification was deleted")
                problem = self.inbox.problem(sub)
                if problem is not None:       # the policy changed, or a newer one went first
                    sub = None
                    raise DeliveryFailed(f"its Notification is not in force ({problem[0]}: "
                                         f"{problem[1]})")
                self.sender.attempt(sub, Target(row["target"]), NotificationBody(**row["body"]))
            except Exception as exc:      # a bug of ours is retried with backoff too, not at once
                if not isinstance(exc, DeliveryFailed):
                    metrics.bug(log, "delivery %s", id_)
                error = str(exc) if isinstance(exc, DeliveryFailed) else \
                    f"benchfarm failed to deliver it ({type(exc).__name__}); the lab's log says why"
                attempts = row["attempts"] + 1
                age = (now - row["occurred"]).total_seconds()
                if sub is None or age >= self.settings.give_up_seconds:
                    self.outbox.give_up(id_, now, error)
                    metrics.NOTIFICATIONS.labels("failed").inc()
                    log.warning("%s/%s: delivery %s (%s) given up after %d attempt(s): %s",
                                row["namespace"], row["notification"], id_, row["target"],
                                attempts, error)
                else:
                    wait = backoff(attempts, id_, self.settings)
                    self.outbox.retry(id_, now, now + timedelta(seconds=wait), error)
                    metrics.NOTIFICATIONS.labels("retried").inc()
                    log.info("%s/%s: delivery %s (%s) failed (attempt %d), again in %.0f s: "
                             "%s", row["namespace"], row["notification"], id_, row["target"],
                             attempts, wait, error)
            else:
                self.outbox.delivered(id_, n.now_utc())
                metrics.NOTIFICATIONS.labels("delivered").inc()
                log.info("%s/%s: delivery %s (%s, %s) delivered", row["namespace"],
                         row["notification"], id_, row["target"], row["event_kind"])
        except Outage as exc:       # the outcome is not recorded: the delivery stays due
            log.warning("delivery %s: its outcome could not be recorded: %s", id_, exc)
        except Exception:
            metrics.bug(log, "delivery %s", id_)
        finally:
            with self.cond:
                self.in_flight.pop(id_, None)
                self.wake_at = 0.0
                self.cond.notify()
                if uid in self.inbox.subs:
                    self.statuses.mark(uid)
