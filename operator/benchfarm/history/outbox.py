"""The notifier's durable outbox: a table in the results database (`notification_outbox`).

Why there: the operator already depends on that database (it indexes every run), it is durable
and backed up with the lab's results, and PostgreSQL gives what an outbox needs in one statement
each: an insert that ignores a delivery already there (its id is derived from the event, so the
same event seen again after a restart adds nothing), the due deliveries in order, and a
delivery's outcome. A delivery is written before anything is sent and marked delivered only
after its receiver said so: an operator that dies in between sends it again (at least once, with
the same id); one that comes back after an API-server or database outage finds every delivery
not made still here. Rows that are done are kept `keep` seconds (the status shows the latest)
and then pruned. What the notifier's fairness and caps ask of it is one statement each too: the
longest-due delivery of each namespace without one in flight, and how many a namespace had
queued since a time. A delivery refused over the namespace's maxDeliveriesPerHour is kept as
done and never attempted (`failed` set, no attempts, its reason in `last_error`, no body): the
same event seen again after a restart is not queued then.

Any failure to reach the server is an `Outage(party="database")` (as `db.Database`'s).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.dialects.postgresql import insert

from benchfarm.history.db import Database
from benchfarm.history.schema import notification_outbox as t


class Outbox:
    def __init__(self, db: Database) -> None:
        self.db = db

    def add(self, rows: Sequence[dict[str, Any]]) -> list[str]:
        """Enqueue deliveries (columns of the table; attempts left out, and the outcome but for
        a refused one's `failed` and `last_error`); returns the ids that were new (a delivery
        already in the outbox is left as it is)."""
        if not rows:
            return []
        rows = [{"failed": None, "last_error": "", **r} for r in rows]    # one set of columns
        stmt = insert(t).on_conflict_do_nothing(index_elements=["id"]).returning(t.c.id)
        return self.db._do("enqueue", lambda conn: [r[0] for r in conn.execute(stmt, list(rows))])

    def existing(self, ids: Sequence[str]) -> set[str]:
        """Which of these deliveries the outbox has (done or not)."""
        q = select(t.c.id).where(t.c.id.in_(list(ids)))
        return self.db._do("read", lambda conn: {r[0] for r in conn.execute(q)})

    def queued_since(self, namespace: str, since: dt.datetime) -> int:
        """Deliveries of the namespace's Notifications queued since `since` (done or not; those
        refused, never attempted, are not counted)."""
        q = select(func.count()).where(t.c.namespace == namespace, t.c.created >= since,
                                       ~(t.c.failed.is_not(None) & (t.c.attempts == 0)))
        return int(self.db._do("read", lambda conn: conn.execute(q).scalar() or 0))

    def due_heads(self, now: dt.datetime, busy: Sequence[str] = ()) -> dict[str, str]:
        """Each namespace's longest-due delivery to attempt now (namespace -> its id), but for
        the namespaces in `busy` (one of theirs is in flight)."""
        q = (select(t.c.namespace, t.c.id)
             .where(t.c.delivered.is_(None), t.c.failed.is_(None), t.c.next_attempt <= now)
             .distinct(t.c.namespace).order_by(t.c.namespace, t.c.next_attempt, t.c.id))
        if busy:
            q = q.where(t.c.namespace.not_in(list(busy)))
        return self.db._do("read", lambda conn: {r[0]: r[1] for r in conn.execute(q)})

    def rows(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """These deliveries, those not made yet."""
        if not ids:
            return []
        q = select(t).where(t.c.id.in_(list(ids)), t.c.delivered.is_(None),
                            t.c.failed.is_(None))
        return self.db._do("read", lambda conn: [dict(r._mapping) for r in conn.execute(q)])

    def next_due(self, busy: Sequence[str] = ()) -> dt.datetime | None:
        """When the next delivery is due, but for the namespaces in `busy` (one of theirs is in
        flight: its end wakes the notifier)."""
        q = select(func.min(t.c.next_attempt)).where(t.c.delivered.is_(None),
                                                     t.c.failed.is_(None))
        if busy:
            q = q.where(t.c.namespace.not_in(list(busy)))
        return self.db._do("read", lambda conn: conn.execute(q).scalar())

    def delivered(self, id_: str, now: dt.datetime) -> None:
        self._set(id_, attempts=t.c.attempts + 1, last_attempt=now, delivered=now,
                  last_error="")

    def retry(self, id_: str, now: dt.datetime, at: dt.datetime, error: str) -> None:
        self._set(id_, attempts=t.c.attempts + 1, last_attempt=now, next_attempt=at,
                  last_error=error[:2000])

    def give_up(self, id_: str, now: dt.datetime, error: str) -> None:
        self._set(id_, attempts=t.c.attempts + 1, last_attempt=now, failed=now,
                  last_error=error[:2000])

    def _set(self, id_: str, **values: Any) -> None:
        stmt = update(t).where(t.c.id == id_).values(**values)
        self.db._do("record a delivery", lambda conn: conn.execute(stmt))

    def recent(self, notification_uid: str, limit: int) -> list[dict[str, Any]]:
        """A Notification's latest deliveries, newest first."""
        q = (select(t.c.id, t.c.event_kind, t.c.subject, t.c.target, t.c.attempts, t.c.created,
                    t.c.last_attempt, t.c.delivered, t.c.failed, t.c.last_error)
             .where(t.c.notification_uid == notification_uid)
             .order_by(func.coalesce(t.c.last_attempt, t.c.created).desc(), t.c.id).limit(limit))
        return self.db._do("read", lambda conn: [dict(r._mapping) for r in conn.execute(q)])

    def counts(self, notification_uid: str) -> dict[str, int]:
        """{delivered, pending, failed, refused} of a Notification's deliveries in the outbox."""
        state = func.count().filter
        q = select(state(t.c.delivered.is_not(None)),
                   state(t.c.failed.is_not(None) & (t.c.attempts > 0)),
                   state(t.c.delivered.is_(None) & t.c.failed.is_(None)),
                   state(t.c.failed.is_not(None) & (t.c.attempts == 0))
                   ).where(t.c.notification_uid == notification_uid)
        delivered, failed, pending, refused = self.db._do("read",
                                                          lambda conn: conn.execute(q).one())
        return {"delivered": delivered, "failed": failed, "pending": pending, "refused": refused}

    def forget(self, notification_uid: str) -> int:
        """A deleted Notification's deliveries not made yet: none will be."""
        stmt = delete(t).where(t.c.notification_uid == notification_uid,
                               t.c.delivered.is_(None), t.c.failed.is_(None))
        return self.db._do("forget", lambda conn: conn.execute(stmt).rowcount)

    def prune(self, before: dt.datetime) -> int:
        """Deliveries done (delivered or given up) before `before`."""
        stmt = delete(t).where(or_(t.c.delivered < before, t.c.failed < before))
        return self.db._do("prune", lambda conn: conn.execute(stmt).rowcount)
