"""The results database's tables (SQLAlchemy Core), as the Alembic migrations create them.

`results`: one row per (run, A/B side, metric): every measured sample (`samples`, in iteration
order, warm-ups and iterations measured outside their envelope left out), their mean and count,
the unit and direction, and the run's identity (namespace, name, uid, plan and its digest,
device type, board, software set: name, artifact digests, the booted kernel release; the A/B
side, the run's labels, its finish time). Denormalised
on purpose: a lab's Grafana charts it with one SELECT. `change_points`: the points already
reported (a ChangePoint event and the counter are for new ones only). `run_conditions`: what
each run's steps were measured under (frequency, governors, temperature, power: a few numbers
per step), read beside a change point.

`notification_outbox` (migration 0003) is not the index's: the notifier's durable outbox, one row
per delivery (a Notification's event to one target) until it is delivered or given up, and kept
a while after. It has a MetaData of its own (`outbox_metadata`), so `results reindex --drop`,
which rebuilds the index from the store, leaves deliveries not yet made alone.

A series is one namespace's: (namespace, metric, device type, plan). Its runs, menus and change
points never mix namespaces (migration 0002 made `namespace` part of both keys).
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

metadata = MetaData()

results = Table(
    "results", metadata,
    Column("run_uid", Text, nullable=False),
    Column("side", Text, nullable=False, server_default=""),     # "" unless an A/B run
    Column("metric", Text, nullable=False),                       # "step/name", "boot/phase"
    Column("unit", Text, nullable=False),
    Column("higher_is_better", Boolean, nullable=False),
    Column("samples", ARRAY(Float), nullable=False),
    Column("mean", Float, nullable=False),
    Column("n", Integer, nullable=False),
    Column("namespace", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("plan", Text, nullable=False),
    Column("plan_digest", Text),
    Column("device_type", Text, nullable=False),
    Column("board", Text, nullable=False),
    Column("software", Text, nullable=False, server_default=""),  # the set's name ("" = board's own)
    Column("software_digests", JSONB, nullable=False, server_default="{}"),
    Column("kernel_release", Text),
    Column("labels", JSONB, nullable=False, server_default="{}"),
    Column("time", DateTime(timezone=True), nullable=False),      # when the run finished
    PrimaryKeyConstraint("run_uid", "side", "metric", name="results_pkey"),
    Index("results_ns_series", "namespace", "metric", "device_type", "plan", "time"),
)

change_points = Table(
    "change_points", metadata,
    Column("namespace", Text, nullable=False, server_default=""),   # the series' namespace
    Column("metric", Text, nullable=False),
    Column("device_type", Text, nullable=False),
    Column("plan", Text, nullable=False),
    Column("run_uid", Text, nullable=False),          # the first run after the change
    Column("direction", Text, nullable=False),
    Column("magnitude", Float, nullable=False),
    Column("pvalue", Float, nullable=False),
    Column("reported", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("namespace", "metric", "device_type", "plan", "run_uid",
                         name="change_points_pkey"),
)

# What each run's step was measured under (migration 0005), over its counted iterations
# (core.statistics.measured): one row per (run, A/B side, step), a few numbers each, so a
# change point can say that the runs on either side of it were measured otherwise.
run_conditions = Table(
    "run_conditions", metadata,
    Column("run_uid", Text, nullable=False),
    Column("side", Text, nullable=False, server_default=""),
    Column("step", Text, nullable=False),
    Column("namespace", Text, nullable=False),
    Column("iterations", Integer, nullable=False),      # the counted ones that recorded any
    Column("min_mhz", Float),                            # current CPU frequency, every policy
    Column("median_mhz", Float),
    Column("max_mhz", Float),
    Column("governors", ARRAY(Text), nullable=False, server_default="{}"),
    Column("min_temp_c", Float),                         # every thermal zone
    Column("max_temp_c", Float),
    Column("mean_power_w", Float),                       # the iterations' average power
    Column("simulated", Boolean, nullable=False, server_default="false"),
    PrimaryKeyConstraint("run_uid", "side", "step", name="run_conditions_pkey"),
)

outbox_metadata = MetaData()

notification_outbox = Table(
    "notification_outbox", outbox_metadata,
    Column("id", Text, primary_key=True),                     # the delivery id (core.notifications.rules)
    Column("namespace", Text, nullable=False),                # the Notification's
    Column("notification", Text, nullable=False),             # its name
    Column("notification_uid", Text, nullable=False),
    Column("target", Text, nullable=False),                   # webhook, email
    Column("event_kind", Text, nullable=False),
    Column("subject", Text, nullable=False),                  # what the event is about
    Column("body", JSONB, nullable=False),                    # api.notifications.NotificationBody
    Column("created", DateTime(timezone=True), nullable=False),
    Column("occurred", DateTime(timezone=True), nullable=False),   # the event's time
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("next_attempt", DateTime(timezone=True), nullable=False),
    Column("last_attempt", DateTime(timezone=True)),
    Column("delivered", DateTime(timezone=True)),
    Column("failed", DateTime(timezone=True)),                # given up
    Column("last_error", Text, nullable=False, server_default=""),
    Index("notification_outbox_due", "next_attempt",
          postgresql_where=text("delivered IS NULL AND failed IS NULL")),
    Index("notification_outbox_by_notification", "notification_uid", "created"),
    Index("notification_outbox_by_namespace", "namespace", "created"),    # migration 0004
)
