"""series per namespace: change_points.namespace, results indexed by namespace first

A series was (metric, device type, plan) across every namespace: one team's runs made change
points, and events, on another's. It is now (namespace, metric, device type, plan). The points
already reported keep their place: each takes the namespace of the run it names (a point whose
run is no longer indexed keeps ""); the series index leads with the namespace, which every read
now gives.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    op.add_column("change_points", sa.Column("namespace", sa.Text, nullable=False,
                                             server_default=""))
    op.execute("UPDATE change_points AS cp SET namespace = r.namespace FROM "
               "(SELECT DISTINCT run_uid, namespace FROM results) AS r "
               "WHERE r.run_uid = cp.run_uid")
    op.drop_constraint("change_points_pkey", "change_points", type_="primary")
    op.create_primary_key("change_points_pkey", "change_points",
                          ["namespace", "metric", "device_type", "plan", "run_uid"])
    op.create_index("results_ns_series", "results",
                    ["namespace", "metric", "device_type", "plan", "time"])
    op.drop_index("results_series", "results")


def downgrade() -> None:
    op.create_index("results_series", "results", ["metric", "device_type", "plan", "time"])
    op.drop_index("results_ns_series", "results")
    op.drop_constraint("change_points_pkey", "change_points", type_="primary")
    # the same point in two namespaces' series is one row again
    op.execute("DELETE FROM change_points a USING change_points b WHERE "
               "(a.metric, a.device_type, a.plan, a.run_uid) = "
               "(b.metric, b.device_type, b.plan, b.run_uid) AND a.namespace > b.namespace")
    op.create_primary_key("change_points_pkey", "change_points",
                          ["metric", "device_type", "plan", "run_uid"])
    op.drop_column("change_points", "namespace")
