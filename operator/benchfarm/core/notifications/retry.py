"""When a failed delivery is tried again: the notifier's settings (`NotifySettings`), the backoff
between attempts, and which events are still worth delivering. Pure."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

from benchfarm.api.notifications import Event
from benchfarm.core.notifications.rules import parse_time
from benchfarm.core.policy.software import Network


@dataclass(frozen=True)
class NotifySettings:
    """How deliveries are retried and where webhooks may go: the operator's settings
    (`Settings.notify_*`, `webhook_loopback_ports`, `internal_cidrs`), handed in as values."""

    backoff_seconds: float = 2.0          # the first retry's delay; doubled at each failure
    backoff_max_seconds: float = 300.0    # at most this between two attempts
    give_up_seconds: float = 86400.0      # a delivery failing this long after its event: Failed
    keep_seconds: float = 7 * 86400.0     # finished deliveries are kept (and events older than
    #                                       this are not delivered: the outbox no longer knows)
    deadline_seconds: float = 20.0        # one attempt, connecting, sending and its answer
    loopback_ports: frozenset[int] = frozenset()
    internal: tuple[Network, ...] = ()


def backoff(attempts: int, delivery: str, settings: NotifySettings) -> float:
    """Seconds before the next attempt after `attempts` failed ones: doubling from
    backoff_seconds up to backoff_max_seconds, less up to a tenth, by the delivery's id (many
    deliveries to a receiver that comes back do not all retry at the same second)."""
    base = min(settings.backoff_max_seconds,
               settings.backoff_seconds * 2.0 ** min(max(attempts - 1, 0), 32))
    spread = int(hashlib.sha256(f"{delivery}/{attempts}".encode()).hexdigest()[:4], 16) / 0xFFFF
    return base * (1 - spread / 10)


def worth_keeping(event: Event, now: datetime, settings: NotifySettings) -> bool:
    """An event older than what the outbox keeps is not delivered (seen again after a restart,
    its old delivery may be gone from the outbox, and it would go out twice)."""
    return (now - parse_time(event.occurredAt)).total_seconds() < settings.keep_seconds
