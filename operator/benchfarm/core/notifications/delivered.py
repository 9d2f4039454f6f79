"""The outbox as a Notification's status shows it: each delivery's state (`delivery`) and the
Delivered condition (`delivered_condition`). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benchfarm.api.notifications import Delivery, DeliveryState, NotificationReason
from benchfarm.core.conditions import iso


def refused(row: Mapping[str, Any]) -> bool:
    """A delivery the outbox keeps as refused (over maxDeliveriesPerHour): done, never tried."""
    return row.get("failed") is not None and not row.get("attempts")


def _delivery_state(row: Mapping[str, Any]) -> DeliveryState:
    if row.get("delivered") is not None:
        return DeliveryState.delivered
    if refused(row):
        return DeliveryState.refused
    if row.get("failed") is not None:
        return DeliveryState.failed
    return DeliveryState.retrying


def delivery(row: Mapping[str, Any]) -> Delivery:
    """One outbox row as status.deliveries lists it."""
    at = row.get("last_attempt") or row.get("created")
    return Delivery(id=row["id"], event=row["event_kind"], subject=row["subject"],
                    target=row["target"], state=_delivery_state(row), attempts=row["attempts"],
                    time=iso(at) if at else "",
                    error=row.get("last_error") or "")


def delivered_condition(rows: list[dict[str, Any]]) -> tuple[str, NotificationReason, str]:
    """The Delivered condition from the latest deliveries (newest first): False while the
    newest event's was refused (over maxDeliveriesPerHour) or the latest attempt of any of them
    failed, True once the latest all went through."""
    newest = max(rows, key=lambda r: (r.get("created") is not None, r.get("created") or 0),
                 default=None)
    if newest is not None and refused(newest):
        return ("False", NotificationReason.rate_limited, str(newest.get("last_error") or ""))
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
