"""One attempt at one delivery of a Notification: a webhook's POST, an e-mail, a KCIDB submission.

The notifier (`operator.notifications.notifier`) decides what is due and records each outcome in the outbox; a
delivery thread asks a `Sender` to make the attempt, which either returns (delivered) or raises
`notify.DeliveryFailed` saying why, in words the Notification's status shows its owner, by the
attempt's one deadline (`notify.deadline`, BENCHFARM_NOTIFY_DEADLINE_SECONDS). What an
attempt needs besides the delivery's own row is read here: the namespace's signing key or token
(the Secret `benchfarm-notifications`, cached KEY_FRESH seconds and used while the API server is
away), the hosts the LabPolicy lets its webhooks reach, and for KCIDB the run and its metrics.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Protocol

from benchfarm.api.labpolicy import LabPolicySpec
from benchfarm.api.notifications import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SECRET_NAME,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    NotificationBody,
    ObjectRef,
    Target,
)
from benchfarm.api.outcomes import Phase
from benchfarm.api.runs import BenchmarkRunStatus
from benchfarm.core.notifications import rules as n
from benchfarm.core.notifications.bodies import email_text, sign, webhook_payload
from benchfarm.core.notifications.retry import NotifySettings
from benchfarm.core.notifications.webhooks import WebhookReach
from benchfarm.errors import InfraError, Outage
from benchfarm.notify import DeliveryFailed, mail, webhook
from benchfarm.report.ci import decided_outcome, kcidb
from benchfarm.store.artifacts import ArtifactStore

KEY_FRESH = 60.0            # seconds a signing key read from its Secret is used without reading


class SenderKube(Protocol):
    """What an attempt reads of the Kubernetes API (`kubeapi.client.Kube` is one)."""

    def secret_data(self, namespace: str, name: str) -> dict[str, bytes] | None: ...

    def get_run(self, namespace: str, name: str) -> dict[str, Any] | None: ...


class Sender:
    def __init__(self, kube: SenderKube, settings: NotifySettings,
                 smtp: mail.SmtpSettings | None, policy: Callable[[], LabPolicySpec],
                 store: ArtifactStore | None, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        """`store`: where finished runs' metrics.json are read for KCIDB submissions."""
        self.kube = kube
        self.settings = settings
        self.smtp = smtp
        self.policy = policy
        self.store = store
        self.clock = clock
        self.keys: dict[tuple[str, str], tuple[bytes, float]] = {}   # read at, monotonic

    def attempt(self, sub: n.Subscription, target: Target, body: NotificationBody) -> None:
        if target == Target.kcidb:
            spec = sub.spec.kcidb
            if spec is None:
                raise DeliveryFailed("the Notification has no kcidb endpoint any more")
            headers = {DELIVERY_HEADER: body.id, EVENT_HEADER: body.kind.value}
            if spec.tokenKey:
                token = self.key(sub.namespace, spec.tokenKey).decode(errors="replace")
                headers["Authorization"] = f"Bearer {token.strip()}"
            webhook.post(spec.url, self.kcidb_document(body.object), headers,
                         self.reach(sub.namespace), self.settings.deadline_seconds)
            return
        if target == Target.email:
            if sub.spec.email is None or self.smtp is None:
                raise DeliveryFailed("the Notification has no e-mail or the lab no SMTP server")
            subject, text = email_text(body)
            mail.send(self.smtp, list(sub.spec.email.to), subject, text, body.id,
                      self.settings.deadline_seconds)
            return
        hook = sub.spec.webhook
        if hook is None:
            raise DeliveryFailed("the Notification has no webhook any more")
        payload = webhook_payload(body, hook.format)
        stamp = int(time.time())
        headers = {DELIVERY_HEADER: body.id, EVENT_HEADER: body.kind.value,
                   TIMESTAMP_HEADER: str(stamp)}
        if hook.signingKey:
            headers[SIGNATURE_HEADER] = sign(self.key(sub.namespace, hook.signingKey),
                                               stamp, payload)
        webhook.post(hook.url, payload, headers, self.reach(sub.namespace),
                     self.settings.deadline_seconds)

    def kcidb_document(self, ref: ObjectRef) -> bytes:
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
        status = BenchmarkRunStatus.of(run.get("status"))
        doc, prefix = None, status.storePrefix
        if self.store is not None and prefix and status.phase in (Phase.succeeded, Phase.failed):
            try:
                doc = self.store.get_document(f"{prefix}/metrics.json")
            except InfraError as exc:
                raise DeliveryFailed(f"the run's results could not be read from the store "
                                     f"({exc.reason})") from exc
        return json.dumps(kcidb([decided_outcome(run, doc)])).encode()

    def reach(self, namespace: str) -> WebhookReach:
        hosts = self.policy().for_namespace(namespace).webhookHosts
        return WebhookReach(tuple(hosts), self.settings.internal,
                              self.settings.loopback_ports)

    def key(self, namespace: str, name: str) -> bytes:
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
