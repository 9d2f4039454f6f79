"""The notifier's outbox work: events in as deliveries, due deliveries out to their attempts.

On the notifier's thread, `step` writes the inbox's events into the outbox (`history.outbox`,
one delivery per target: the rows the inbox matched), drops a deleted Notification's pending
deliveries, hands the due deliveries to a few delivery threads and prunes done deliveries. On a
delivery thread, `kube.deliveries.Sender` makes one attempt and its outcome is recorded here: a
failed attempt is tried again with exponential backoff (`core.notify.backoff`) until it
succeeds or its event is older than the give-up time; each delivery keeps its id throughout
(the receiver dedupes on it). An outage of the database leaves the events queued and the
deliveries due, in the outbox.

Its state is the notifier's, under the notifier's one condition (`cond`).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Protocol

from ..api.notifications import NotificationBody, Target
from ..core import notify as n
from ..errors import Outage
from ..history.outbox import Outbox
from ..notify import DeliveryFailed
from . import metrics
from .deliveries import Sender
from .workers import Workers

log = logging.getLogger("benchfarm.notify")
DELIVERY_THREADS = 4        # deliveries in flight at once (each mostly waits for its receiver)
BATCH = 32                  # due deliveries read at once
PRUNE_EVERY = 3600.0        # seconds between two prunings of done deliveries
IDLE = 30.0                 # seconds the thread sleeps with nothing due (new work wakes it)


class Queued(Protocol):
    """What the outbox's work asks of the inbox (`kube.inbox`): its queue, the Notifications in
    force, the deleted ones' uids (each read under the condition's lock) and the matching."""

    items: deque[tuple[str, Any]]
    subs: dict[str, n.Subscription]
    forgotten: list[str]

    def rows(self, subs: list[n.Subscription], kind: str, item: Any, now: datetime
             ) -> list[dict[str, Any]]: ...


class Marks(Protocol):
    """What the outbox's work asks of the Notifications' statuses (`kube.notification_status`)."""

    def mark(self, uid: str) -> None: ...


class Dispatcher:
    def __init__(self, cond: threading.Condition, outbox: Outbox | None, inbox: Queued,
                 statuses: Marks, sender: Sender, settings: n.NotifySettings,
                 clock: Callable[[], float]) -> None:
        """`cond`: the notifier's condition, which guards this state too."""
        self.cond = cond
        self.outbox = outbox
        self.inbox = inbox
        self.statuses = statuses
        self.sender = sender
        self.settings = settings
        self.clock = clock
        self.in_flight: set[str] = set()
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
                subs = list(self.inbox.subs.values())
            now = n.now_utc()
            try:
                rows = self.inbox.rows(subs, kind, item, now)
            except Exception:       # an object benchfarm cannot read must not stop the rest
                metrics.bug(log, "notifications: a %s event passed over", kind)
                with self.cond:
                    self.inbox.items.popleft()
                continue
            new = self.outbox.add(rows)      # an Outage leaves the event queued
            with self.cond:
                self.inbox.items.popleft()
                for row in rows:
                    if row["id"] in new:
                        self.statuses.mark(str(row["notification_uid"]))
                if new:
                    self.wake_at = 0.0
            metrics.NOTIFICATIONS.labels("queued").inc(len(new))
            for row in rows:
                if row["id"] in new:
                    log.info("%s/%s: %s %s queued for %s (delivery %s)", row["namespace"],
                             row["notification"], row["event_kind"], row["subject"],
                             row["target"], row["id"])

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
        """Hand the due deliveries to the delivery threads; note when the next is due."""
        assert self.outbox is not None
        with self.cond:
            if self.clock() < self.wake_at:
                return
            skip = list(self.in_flight)
        rows = self.outbox.due(n.now_utc(), BATCH, skip)
        for row in rows:
            with self.cond:
                self.in_flight.add(row["id"])
            self.pool.submit(self._deliver, row)
        nxt = None if rows else self.outbox.next_due(skip)   # a delivery ending wakes us
        with self.cond:
            if rows:
                self.wake_at = self.clock() + 0.2   # the rest of a backlog, after these
            elif nxt is None:
                self.wake_at = self.clock() + IDLE
            else:
                self.wake_at = self.clock() + max(0.0, (nxt - n.now_utc()).total_seconds())

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
                    wait = n.backoff(attempts, id_, self.settings)
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
                self.in_flight.discard(id_)
                self.wake_at = 0.0
                if uid in self.inbox.subs:
                    self.statuses.mark(uid)
