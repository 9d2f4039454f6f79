"""Notifications, delivered from a durable outbox on threads of their own: never a run's wait.

kopf feeds every Notification to `observe`; the operator's parts hand over what happened
(`emit`: a lease granted, ending or ended, a board quarantined or back, a change point; and
`run_seen`/`campaign_seen`: a finished run's or campaign's object, whose events are derived
here, `core.notify`). Those calls only append to a queue and return: the scheduler's rounds,
kopf's handlers and the indexer never wait for the database, a receiver or a mail server.

The notifier's thread matches each event to the subscriptions of its namespace and writes one
delivery per target into the outbox (`history.outbox`, in the results database), then hands the
due deliveries to a few delivery threads: a webhook's POST (`notify.webhook`, signed with the
namespace's key from the Secret `benchfarm-notifications`), an e-mail (`notify.mail`), or a
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

import json
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
    DELIVERY_HEADER,
    EVENT_HEADER,
    SECRET_NAME,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    Delivery,
    DeliveryState,
    Event,
    NotificationBody,
    NotificationReason,
    NotificationSpec,
    ObjectRef,
    Target,
)
from ..api.outcomes import Phase
from ..core import notify as n
from ..core.conditions import set_condition
from ..errors import InfraError, Outage
from ..history.outbox import Outbox
from ..notify import DeliveryFailed, mail, webhook
from ..report.ci import decided_outcome, kcidb
from ..store.artifacts import ArtifactStore
from . import metrics
from .workers import Workers

log = logging.getLogger("benchfarm.notify")
PLURAL = "notifications"
DELIVERY_THREADS = 4        # deliveries in flight at once (each mostly waits for its receiver)
BATCH = 32                  # due deliveries read at once
STATUS_EVERY = 2.0          # seconds, at least, between two status writes of one Notification
KEY_FRESH = 60.0            # seconds a signing key read from its Secret is used without reading
PRUNE_EVERY = 3600.0        # seconds between two prunings of done deliveries
MAX_BACKOFF = 30.0          # seconds between two tries while the database is away
IDLE = 30.0                 # seconds the thread sleeps with nothing due (new work wakes it)


class NotifierKube(Protocol):
    """What the notifier asks of the Kubernetes API (`kubeapi.client.Kube` is one, with a short
    outage budget: the notifier waits an outage out itself)."""

    def list_custom_all(self, plural: str) -> list[dict[str, Any]]: ...

    def patch_custom(self, plural: str, namespace: str, name: str, patch: dict[str, Any],
                     *, status: bool = False) -> bool: ...

    def secret_data(self, namespace: str, name: str) -> dict[str, bytes] | None: ...

    def get_run(self, namespace: str, name: str) -> dict[str, Any] | None: ...


class Notifier:
    def __init__(self, outbox: Outbox | None, kube: NotifierKube, settings: n.NotifySettings,
                 smtp: mail.SmtpSettings | None, admin_namespace: str,
                 policy: Callable[[], LabPolicySpec], store: ArtifactStore | None = None
                 ) -> None:
        """`store`: where finished runs' metrics.json are read for KCIDB submissions."""
        self.outbox = outbox
        self.kube = kube
        self.store = store
        self.settings = settings
        self.smtp = smtp
        self.admin_namespace = admin_namespace
        self.policy = policy
        self.subs: dict[str, n.Subscription] = {}          # uid -> subscription
        self.conditions: dict[str, list[dict[str, Any]]] = {}   # uid -> as last written
        self.by_namespace: dict[str, int] = {}              # namespace -> subscriptions
        self.inbox: deque[tuple[str, Any]] = deque()         # ("event", Event) or ("run", body)…
        self.forgotten: list[str] = []                       # deleted Notifications' uids
        self.dirty: dict[str, float] = {}                    # uid -> when its status is due
        self.written_at: dict[str, float] = {}
        self.in_flight: set[str] = set()
        self.keys: dict[tuple[str, str], tuple[bytes, float]] = {}
        self.cond = threading.Condition()
        self.stopping = False
        self.wake_at = 0.0                                   # monotonic: the next due delivery
        self.pruned_at = 0.0
        self.clock = time.monotonic
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
                self._attempt(sub, Target(row["target"]), NotificationBody(**row["body"]))
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

    def _attempt(self, sub: n.Subscription, target: Target, body: NotificationBody) -> None:
        if target == Target.kcidb:
            spec = sub.spec.kcidb
            if spec is None:
                raise DeliveryFailed("the Notification has no kcidb endpoint any more")
            headers = {DELIVERY_HEADER: body.id, EVENT_HEADER: body.kind.value}
            if spec.tokenKey:
                token = self._key(sub.namespace, spec.tokenKey).decode(errors="replace")
                headers["Authorization"] = f"Bearer {token.strip()}"
            webhook.post(spec.url, self._kcidb_document(body.object), headers,
                         self._reach(sub.namespace))
            return
        if target == Target.email:
            if sub.spec.email is None or self.smtp is None:
                raise DeliveryFailed("the Notification has no e-mail or the lab no SMTP server")
            subject, text = n.email_text(body)
            mail.send(self.smtp, list(sub.spec.email.to), subject, text, body.id)
            return
        hook = sub.spec.webhook
        if hook is None:
            raise DeliveryFailed("the Notification has no webhook any more")
        payload = n.webhook_payload(body, hook.format)
        stamp = int(time.time())
        headers = {DELIVERY_HEADER: body.id, EVENT_HEADER: body.kind.value,
                   TIMESTAMP_HEADER: str(stamp)}
        if hook.signingKey:
            headers[SIGNATURE_HEADER] = n.sign(self._key(sub.namespace, hook.signingKey),
                                               stamp, payload)
        webhook.post(hook.url, payload, headers, self._reach(sub.namespace))

    def _kcidb_document(self, ref: ObjectRef) -> bytes:
        """The finished run's KCIDB document, as `benchfarm export kcidb` writes it: read at
        delivery from the run's object and its metrics.json (a retry reads them again)."""
        try:
            run = self.kube.get_run(ref.namespace, ref.name)
        except Outage as exc:
            raise DeliveryFailed("the run could not be read: the Kubernetes API is "
                                 "unavailable") from exc
        if run is None or (run.get("metadata") or {}).get("uid") != ref.uid:
            raise DeliveryFailed(f"run {ref.namespace}/{ref.name} was deleted before its "
                                 "results were submitted")
        status = run.get("status") or {}
        doc, prefix = None, status.get("storePrefix")
        if self.store is not None and prefix and status.get("phase") in (Phase.succeeded,
                                                                        Phase.failed):
            try:
                if self.store.sha256(f"{prefix}/metrics.json") is not None:
                    doc = json.loads(self.store.get(f"{prefix}/metrics.json"))
            except InfraError as exc:
                raise DeliveryFailed(f"the run's results could not be read from the store "
                                     f"({exc.reason})") from exc
        return json.dumps(kcidb([decided_outcome(run, doc)])).encode()

    def _reach(self, namespace: str) -> n.WebhookReach:
        hosts = self.policy().for_namespace(namespace).webhookHosts
        return n.WebhookReach(tuple(hosts), self.settings.internal,
                              self.settings.loopback_ports)

    def _key(self, namespace: str, name: str) -> bytes:
        """The signing key `name` of the namespace's Secret benchfarm-notifications, read again
        after KEY_FRESH seconds; while the API server is away, the one read before."""
        cached = self.keys.get((namespace, name))
        if cached is not None and self.clock() - cached[1] < KEY_FRESH:
            return cached[0]
        try:
            data = self.kube.secret_data(namespace, SECRET_NAME)
        except Outage:
            if cached is not None:
                return cached[0]
            raise DeliveryFailed("the signing key could not be read: the Kubernetes API is "
                                 "unavailable") from None
        except PermissionError as exc:
            raise DeliveryFailed(f"the operator may not read Secret {SECRET_NAME} in "
                                 f"{namespace} (the chart grants it that one name)") from exc
        value = (data or {}).get(name)
        if not value:
            self.keys.pop((namespace, name), None)
            raise DeliveryFailed(f"Secret {SECRET_NAME} in {namespace} has no key {name!r} "
                                 "(webhook.signingKey)")
        self.keys[(namespace, name)] = (value, self.clock())
        return value

    # -- statuses -----------------------------------------------------------------------------
    def _problem(self, sub: n.Subscription) -> tuple[NotificationReason, str] | None:
        return n.spec_problem(sub, self.admin_namespace, self._reach(sub.namespace),
                              self.smtp is not None, self.outbox is not None)

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
        conditions = set_condition(conditions, "Delivered", *delivered_condition(rows),
                                   sub.generation)
        status = {"conditions": conditions, "deliveries": [
                      delivery(r).model_dump(mode="json") for r in rows],
                  "delivered": counts.get("delivered", 0), "pending": counts.get("pending", 0),
                  "failed": counts.get("failed", 0), "observedGeneration": sub.generation}
        if self.kube.patch_custom(PLURAL, sub.namespace, sub.name, {"status": status},
                                  status=True):
            self.conditions[sub.uid] = conditions


def _subject(event: Event) -> str:
    ref = event.object
    return f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name


def _state(row: Mapping[str, Any]) -> DeliveryState:
    if row.get("delivered") is not None:
        return DeliveryState.delivered
    if row.get("failed") is not None:
        return DeliveryState.failed
    return DeliveryState.retrying


def delivery(row: Mapping[str, Any]) -> Delivery:
    """One outbox row as status.deliveries lists it."""
    at = row.get("last_attempt") or row.get("created")
    return Delivery(id=row["id"], event=row["event_kind"], subject=row["subject"],
                    target=row["target"], state=_state(row), attempts=row["attempts"],
                    time=at.strftime("%Y-%m-%dT%H:%M:%SZ") if at else "",
                    error=row.get("last_error") or "")


def delivered_condition(rows: list[dict[str, Any]]) -> tuple[str, NotificationReason, str]:
    """The Delivered condition from the latest deliveries (newest first): False while the
    latest attempt of any of them failed, True once the latest all went through."""
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
