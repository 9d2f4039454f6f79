"""Notifications, delivered from a durable outbox on threads of their own: never a run's wait.

kopf feeds every Notification to `observe`; the operator's parts hand over what happened
(`emit`: a lease granted, ending or ended, a board quarantined or back, a change point; and
`run_seen`/`campaign_seen`: a finished run's or campaign's object, whose events are derived
here, `core.notify`). Those calls only append to a queue and return: the scheduler's rounds,
kopf's handlers and the indexer never wait for the database, a receiver or a mail server.

The notifier's thread matches each event to the subscriptions of its namespace and writes one
delivery per target into the outbox (`history.outbox`, in the results database), then hands the
due deliveries to a few delivery threads, where `kube.deliveries.Sender` makes each attempt: a
webhook's POST (`notify.webhook`, signed with the namespace's key from the Secret
`benchfarm-notifications`), an e-mail (`notify.mail`), or a
finished run's KCIDB document POSTed to a submission endpoint (`report.ci.kcidb`, built at
delivery from the run and its metrics.json in the store, with a bearer token from that Secret). An
attempt that fails is tried again with exponential backoff (`core.notify.backoff`) until it
succeeds or its event is older than the give-up time; each delivery keeps its id throughout
(the receiver dedupes on it). While the database is away, events wait here and deliveries wait
in the outbox; while the API server is away, deliveries go on (signing keys read before are
used) and statuses are written once it is back. A Notification's status shows its latest
deliveries and their outcome, written at most every STATUS_EVERY seconds per Notification.

Everything this thread knows is rebuilt at a start: the Notifications are listed before the
runs are (`load`), every finished run is seen again and makes no second delivery (the outbox
has its id), and the outbox itself is the queue.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol

from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from ..api.models import LabPolicySpec
from ..api.notifications import (
    DELIVERIES_SHOWN,
    Event,
    NotificationBody,
    NotificationReason,
    NotificationSpec,
    Target,
)
from ..core import notify as n
from ..core.conditions import set_condition
from ..errors import Outage
from ..history.outbox import Outbox
from ..notify import DeliveryFailed, mail
from ..store.artifacts import ArtifactStore
from . import metrics
from .deliveries import Sender, SenderKube
from .workers import Workers

log = logging.getLogger("benchfarm.notify")
PLURAL = "notifications"
DELIVERY_THREADS = 4        # deliveries in flight at once (each mostly waits for its receiver)
BATCH = 32                  # due deliveries read at once
STATUS_EVERY = 2.0          # seconds, at least, between two status writes of one Notification
PRUNE_EVERY = 3600.0        # seconds between two prunings of done deliveries
MAX_BACKOFF = 30.0          # seconds between two tries while the database is away
IDLE = 30.0                 # seconds the thread sleeps with nothing due (new work wakes it)


class NotifierKube(SenderKube, Protocol):
    """What the notifier asks of the Kubernetes API besides its sender's (`kubeapi.client.Kube`
    is one, with a short outage budget: the notifier waits an outage out itself)."""

    def list_custom_all(self, plural: str) -> list[dict[str, Any]]: ...

    def patch_custom(self, plural: str, namespace: str, name: str, patch: dict[str, Any],
                     *, status: bool = False) -> bool: ...


class Notifier:
    def __init__(self, outbox: Outbox | None, kube: NotifierKube, settings: n.NotifySettings,
                 smtp: mail.SmtpSettings | None, admin_namespace: str,
                 policy: Callable[[], LabPolicySpec], store: ArtifactStore | None = None
                 ) -> None:
        """`store`: where finished runs' metrics.json are read for KCIDB submissions."""
        self.outbox = outbox
        self.kube = kube
        self.settings = settings
        self.admin_namespace = admin_namespace
        self.subs: dict[str, n.Subscription] = {}          # uid -> subscription
        self.conditions: dict[str, list[dict[str, Any]]] = {}   # uid -> as last written
        self.by_namespace: dict[str, int] = {}              # namespace -> subscriptions
        self.inbox: deque[tuple[str, Any]] = deque()         # ("event", Event) or ("run", body)…
        self.forgotten: list[str] = []                       # deleted Notifications' uids
        self.dirty: dict[str, float] = {}                    # uid -> when its status is due
        self.written_at: dict[str, float] = {}
        self.in_flight: set[str] = set()
        self.cond = threading.Condition()
        self.stopping = False
        self.wake_at = 0.0                                   # monotonic: the next due delivery
        self.pruned_at = 0.0
        self.clock = time.monotonic
        self.sender = Sender(kube, settings, smtp, policy, store)
        self.thread = threading.Thread(target=self._loop, name="notifier", daemon=True)
        self.pool = Workers(max_workers=DELIVERY_THREADS, thread_name_prefix="notify-delivery")

    # -- lifecycle ----------------------------------------------------------------------------
    def load(self) -> None:
        """Every Notification, before the runs are read back at a start (their events are
        matched against these). Without the CRD (an upgrade whose CRDs are not applied yet:
        helm does not upgrade them) there are none, and kopf's watch brings them once it is."""
        try:
            bodies = self.kube.list_custom_all(PLURAL)
        except ApiException as exc:
            if exc.status != 404:
                raise
            log.warning("the Notification CRD is not installed: no notifications until it is "
                        "(kubectl apply -f crds/)")
            return
        for body in bodies:
            self.observe("ADDED", body)

    def start(self) -> None:
        if self.thread.ident is None:     # a start the lab's outage made the operator retry
            self.thread.start()

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify()
        self.thread.join(timeout=5)
        self.pool.shutdown(wait=True, cancel_futures=True)

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
                self.dirty.pop(uid, None)
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
            self.conditions[uid] = list((body.get("status") or {}).get("conditions") or [])
            if old is None or old.generation != sub.generation or \
                    not self.conditions[uid]:
                self._mark(uid)

    def policy_changed(self) -> None:
        """The LabPolicy changed: every Notification's Ready condition is judged again."""
        with self.cond:
            for uid in self.subs:
                self._mark(uid)

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
            self.inbox.append(item)
            self.cond.notify()

    def _mark(self, uid: str) -> None:
        """(Under the condition's lock) the Notification's status is to be written."""
        self.dirty.setdefault(uid, max(self.clock(), self.written_at.get(uid, 0.0) +
                                       STATUS_EVERY))
        self.cond.notify()

    # -- the thread ---------------------------------------------------------------------------
    def _loop(self) -> None:
        backoff = 1.0
        while True:
            with self.cond:
                now = self.clock()
                due = min([self.wake_at, *self.dirty.values()], default=self.wake_at)
                if not self.stopping and not self.inbox and not self.forgotten and due > now:
                    self.cond.wait(min(due - now, IDLE))
                if self.stopping:
                    return
            try:
                self._step()
                backoff = 1.0
            except Outage as exc:
                log.warning("notifications: %s; retrying in %.0f s (%d event(s) wait)", exc,
                            backoff, len(self.inbox))
                with self.cond:
                    self.cond.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
            except Exception:               # the loop's last handler
                metrics.bug(log, "notifier")
                with self.cond:
                    self.cond.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    def _step(self) -> None:
        if self.outbox is not None:
            self.outbox.db.ensure_migrated()
            self._enqueue()
            self._forget()
            self._dispatch()
            self._prune()
        else:                     # nothing is ever due: only statuses wake the thread
            self.wake_at = self.clock() + IDLE
        self._statuses()

    def _events(self, kind: str, item: Any) -> list[Event]:
        if kind == "run":
            return n.run_events(item)
        if kind == "campaign":
            event = n.campaign_event(item)
            return [event] if event is not None else []
        return [item]

    def _enqueue(self) -> None:
        """The events waiting here into the outbox (they leave the queue once written)."""
        assert self.outbox is not None
        while True:
            with self.cond:
                if not self.inbox:
                    return
                kind, item = self.inbox[0]
                subs = list(self.subs.values())
            now = n.now_utc()
            try:
                rows = self._rows(subs, self._events(kind, item), now)
            except Exception:       # an object benchfarm cannot read must not stop the rest
                metrics.bug(log, "notifications: a %s event passed over", kind)
                with self.cond:
                    self.inbox.popleft()
                continue
            new = self.outbox.add(rows)      # an Outage leaves the event queued
            with self.cond:
                self.inbox.popleft()
                for row in rows:
                    if row["id"] in new:
                        self._mark(str(row["notification_uid"]))
                if new:
                    self.wake_at = 0.0
            metrics.NOTIFICATIONS.labels("queued").inc(len(new))
            for row in rows:
                if row["id"] in new:
                    log.info("%s/%s: %s %s queued for %s (delivery %s)", row["namespace"],
                             row["notification"], row["event_kind"], row["subject"],
                             row["target"], row["id"])

    def _rows(self, subs: list[n.Subscription], events: list[Event], now: datetime
              ) -> list[dict[str, Any]]:
        """The outbox rows of these events: one per subscription in force and target."""
        rows: list[dict[str, Any]] = []
        for event in events:
            if not n.worth_keeping(event, now, self.settings):
                continue
            for sub in n.matches(subs, event, self.admin_namespace):
                if self._problem(sub) is not None:
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

    def _forget(self) -> None:
        assert self.outbox is not None
        with self.cond:
            gone, self.forgotten = self.forgotten, []
        for i, uid in enumerate(gone):
            try:
                dropped = self.outbox.forget(uid)
            except Outage:
                with self.cond:
                    self.forgotten.extend(gone[i:])
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
                    sub = self.subs.get(uid)
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
                if uid in self.subs:
                    self._mark(uid)

    # -- statuses -----------------------------------------------------------------------------
    def _problem(self, sub: n.Subscription) -> tuple[NotificationReason, str] | None:
        return n.spec_problem(sub, self.admin_namespace, self.sender.reach(sub.namespace),
                              self.sender.smtp is not None, self.outbox is not None)

    def _statuses(self) -> None:
        now = self.clock()
        with self.cond:
            due = [uid for uid, at in self.dirty.items() if at <= now]
        for uid in due:
            with self.cond:
                sub = self.subs.get(uid)
                self.dirty.pop(uid, None)
            if sub is None:
                continue
            try:
                self._write_status(sub)
            except Outage:
                with self.cond:
                    self._mark(uid)
                raise
            with self.cond:
                self.written_at[uid] = self.clock()

    def _write_status(self, sub: n.Subscription) -> None:
        problem = self._problem(sub)
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
        conditions = set_condition(conditions, "Delivered", *n.delivered_condition(rows),
                                   sub.generation)
        status = {"conditions": conditions, "deliveries": [
                      n.delivery(r).model_dump(mode="json") for r in rows],
                  "delivered": counts.get("delivered", 0), "pending": counts.get("pending", 0),
                  "failed": counts.get("failed", 0), "observedGeneration": sub.generation}
        if self.kube.patch_custom(PLURAL, sub.namespace, sub.name, {"status": status},
                                  status=True):
            self.conditions[sub.uid] = conditions


def _subject(event: Event) -> str:
    ref = event.object
    return f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name


