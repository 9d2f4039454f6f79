"""Notifications, delivered from a durable outbox on threads of their own: never a run's wait.

kopf feeds every Notification to `observe`; the operator's parts hand over what happened
(`emit`: a lease granted, ending or ended, a board quarantined or back, a change point; and
`run_seen`/`campaign_seen`: a finished run's or campaign's object, whose events are derived
here, `core.notifications.events`). Those calls only append to a queue and return: the scheduler's rounds,
kopf's handlers and the indexer never wait for the database, a receiver or a mail server.

The notifier's thread matches each event to the subscriptions of its namespace in force (the
namespace's LabPolicy caps how many, their recipients and its deliveries an hour) and writes one
delivery per target into the outbox (`history.outbox`, in the results database), then hands the
due deliveries to a few delivery threads, one namespace at a time each and the namespaces in
turn, where `operator.notifications.deliveries.Sender` makes each attempt within one deadline: a
webhook's POST (`notify.webhook`, signed with the namespace's key from the Secret
`benchfarm-notifications`), an e-mail (`notify.mail`), or a
finished run's KCIDB document POSTed to a submission endpoint (`report.ci.kcidb`, built at
delivery from the run and its metrics.json in the store, with a bearer token from that Secret). An
attempt that fails is tried again with exponential backoff (`core.notifications.retry.backoff`) until it
succeeds or its event is older than the give-up time; each delivery keeps its id throughout
(the receiver dedupes on it). While the database is away, events wait here and deliveries wait
in the outbox; while the API server is away, deliveries go on (signing keys read before are
used) and statuses are written once it is back. A Notification's status shows its latest
deliveries and their outcome, written at most every STATUS_EVERY seconds per Notification.

Everything this thread knows is rebuilt at a start: the Notifications are listed before the
runs are (`load`), every finished run is seen again and makes no second delivery (the outbox
has its id), and the outbox itself is the queue.

This module owns the thread, its start and stop, and what the operator calls; the parts it runs
are modules of their own, sharing its one condition: the queue of what was handed over and the
matching of events to Notifications (`operator.notifications.inbox`), the outbox's work and each attempt's outcome
(`operator.notifications.dispatch`), and the Notifications' statuses (`operator.notifications.status`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from kubernetes.client.rest import ApiException

from benchfarm.api.labpolicy import LabPolicySpec
from benchfarm.api.notifications import Event
from benchfarm.core.notifications.retry import NotifySettings
from benchfarm.core.notifications.webhooks import ports
from benchfarm.core.policy.software import internal_networks
from benchfarm.errors import Outage
from benchfarm.history.outbox import Outbox
from benchfarm.notify import mail
from benchfarm.operator.notifications.deliveries import Sender, SenderKube
from benchfarm.operator.notifications.dispatch import IDLE, Dispatcher
from benchfarm.operator.notifications.inbox import Inbox
from benchfarm.operator.notifications.status import PLURAL, Statuses, StatusKube
from benchfarm.operator.state import metrics
from benchfarm.settings import Settings
from benchfarm.store.artifacts import ArtifactStore

log = logging.getLogger("benchfarm.notify")
MAX_BACKOFF = 30.0          # seconds between two tries while the database is away


class NotifierKube(SenderKube, StatusKube, Protocol):
    """What the notifier asks of the Kubernetes API besides its sender's and its status
    writes' (`kubeapi.client.Kube` is one, with a short outage budget: the notifier waits an
    outage out itself)."""

    def list_custom_all(self, plural: str) -> list[dict[str, Any]]: ...


class Notifier:
    def __init__(self, outbox: Outbox | None, kube: NotifierKube, settings: NotifySettings,
                 smtp: mail.SmtpSettings | None, admin_namespace: str,
                 policy: Callable[[], LabPolicySpec], store: ArtifactStore | None = None
                 ) -> None:
        """`store`: where finished runs' metrics.json are read for KCIDB submissions."""
        self.outbox = outbox
        self.kube = kube
        self.settings = settings
        self.admin_namespace = admin_namespace
        # one condition guards the state of all three parts: the inbox's, the statuses' and
        # the outbox work's, as one lock (what one part decides under it, the others see)
        self.cond = threading.Condition()
        self.stopping = False
        self.clock = time.monotonic
        self.sender = Sender(kube, settings, smtp, policy, store)
        self.statuses = Statuses(self.cond, outbox, kube, self.sender, admin_namespace,
                                 self.clock)
        self.inbox = Inbox(self.cond, self.statuses, settings, admin_namespace)
        self.dispatcher = Dispatcher(self.cond, outbox, self.inbox, self.statuses, self.sender,
                                     settings, self.clock)
        self.thread = threading.Thread(target=self._loop, name="notifier", daemon=True)

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
        self.dispatcher.pool.shutdown(wait=True, cancel_futures=True)

    # -- what the operator hands over (any thread; never waits: `operator.notifications.inbox`) -----------------
    def observe(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """A Notification was added, changed or deleted (kopf's watch)."""
        self.inbox.observe(event_type, body)

    def policy_changed(self) -> None:
        """The LabPolicy changed: every Notification's Ready condition is judged again."""
        self.inbox.policy_changed()

    def emit(self, event: Event) -> None:
        self.inbox.emit(event)

    def run_seen(self, body: Mapping[str, Any]) -> None:
        """A finished run (seen at every watch event and every start: its events have keys)."""
        self.inbox.run_seen(body)

    def campaign_seen(self, body: Mapping[str, Any]) -> None:
        self.inbox.campaign_seen(body)

    def bisection_seen(self, body: Mapping[str, Any]) -> None:
        self.inbox.bisection_seen(body)

    # -- the thread ---------------------------------------------------------------------------
    def _loop(self) -> None:
        backoff = 1.0
        while True:
            with self.cond:
                now = self.clock()
                due = min([self.dispatcher.wake_at, *self.statuses.dirty.values()],
                          default=self.dispatcher.wake_at)
                if not self.stopping and not self.inbox.items and not self.inbox.forgotten \
                        and not self.inbox.stale and due > now:
                    self.cond.wait(min(due - now, IDLE))
                if self.stopping:
                    return
            try:
                self._step()
                backoff = 1.0
            except Outage as exc:
                log.warning("notifications: %s; retrying in %.0f s (%d event(s) wait)", exc,
                            backoff, len(self.inbox.items))
                with self.cond:
                    self.cond.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
            except Exception:               # the loop's last handler
                metrics.bug(log, "notifier")
                with self.cond:
                    self.cond.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    def _step(self) -> None:
        """The outbox's work (`operator.notifications.dispatch`), the namespaces whose Notifications changed
        judged again (`operator.notifications.inbox`), then the statuses due (`operator.notifications.status`)."""
        self.dispatcher.step()
        self.inbox.judge_stale()
        self.statuses.write_due(self.inbox.subs, self.inbox.problem)


def notify_settings_from(s: Settings) -> NotifySettings:
    """The deliveries' settings, from the operator's; ValueError names a bad loopback port."""
    return NotifySettings(backoff_seconds=s.notify_backoff_seconds,
                            backoff_max_seconds=s.notify_backoff_max_seconds,
                            give_up_seconds=s.notify_give_up_seconds,
                            deadline_seconds=s.notify_deadline_seconds,
                            loopback_ports=ports(s.webhook_loopback_ports),
                            internal=internal_networks(s.internal_cidrs))
