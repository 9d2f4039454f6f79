"""What a notification's receiver gets: the body of one delivery, a webhook's payload (ours or
Slack's) and its signature, an e-mail's subject and text. Pure."""

from __future__ import annotations

import hashlib
import hmac
import json

from benchfarm.api.notifications import Event, NotificationBody, Target, WebhookFormat
from benchfarm.core.notifications.rules import Subscription, delivery_id


def body_of(event: Event, sub: Subscription, target: Target) -> NotificationBody:
    return NotificationBody(**event.model_dump(), id=delivery_id(sub.uid, event.key, target),
                            notification=sub.key)


def webhook_payload(body: NotificationBody, fmt: WebhookFormat) -> bytes:
    if fmt == WebhookFormat.slack:
        return json.dumps({"text": f"[benchfarm] {body.summary}"}).encode()
    return body.model_dump_json().encode()


def sign(key: bytes, timestamp: int, payload: bytes) -> str:
    """X-Benchfarm-Signature: HMAC-SHA256 over `<timestamp>.<body>`, so a captured delivery
    replayed later fails a receiver that checks the timestamp's age."""
    mac = hmac.new(key, str(timestamp).encode() + b"." + payload, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def email_text(body: NotificationBody) -> tuple[str, str]:
    """(subject, plain text) of an e-mail."""
    lines = [body.summary, "", f"event: {body.kind}", f"when: {body.occurredAt}",
             f"what: {body.object.kind} {'/'.join(p for p in (body.object.namespace, body.object.name) if p)}"]
    for k, v in body.details.items():
        if v in ("", [], {}, None):
            continue
        shown = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
        lines.append(f"{k}: {shown}")
    lines += ["", f"Notification {body.notification}; delivery {body.id}"]
    subject = f"[benchfarm] {body.summary}".replace("\r", " ").replace("\n", " ")
    return subject[:200], "\n".join(lines) + "\n"
