"""Delivering notifications: a webhook's POST and an e-mail, one attempt each.

What is delivered, to whom, and when again is decided elsewhere (`core.notifications`, the notifier in
`operator.notifications.notifier`, its outbox in `history.outbox`); this package only makes one attempt and says
whether it worked (`DeliveryFailed` with what went wrong, for the Notification's status and the
operator's log). It knows neither Kubernetes nor the database.
"""


class DeliveryFailed(Exception):
    """One attempt did not deliver; the message says why (a tenant reads it, redacted)."""
