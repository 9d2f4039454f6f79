"""results and change_points

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "results",
        sa.Column("run_uid", sa.Text, nullable=False),
        sa.Column("side", sa.Text, nullable=False, server_default=""),
        sa.Column("metric", sa.Text, nullable=False),
        sa.Column("unit", sa.Text, nullable=False),
        sa.Column("higher_is_better", sa.Boolean, nullable=False),
        sa.Column("samples", ARRAY(sa.Float), nullable=False),
        sa.Column("mean", sa.Float, nullable=False),
        sa.Column("n", sa.Integer, nullable=False),
        sa.Column("namespace", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("plan", sa.Text, nullable=False),
        sa.Column("plan_digest", sa.Text),
        sa.Column("device_type", sa.Text, nullable=False),
        sa.Column("board", sa.Text, nullable=False),
        sa.Column("software", sa.Text, nullable=False, server_default=""),
        sa.Column("software_digests", JSONB, nullable=False, server_default="{}"),
        sa.Column("kernel_release", sa.Text),
        sa.Column("labels", JSONB, nullable=False, server_default="{}"),
        sa.Column("time", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("run_uid", "side", "metric", name="results_pkey"),
    )
    op.create_index("results_series", "results", ["metric", "device_type", "plan", "time"])
    op.create_table(
        "change_points",
        sa.Column("metric", sa.Text, nullable=False),
        sa.Column("device_type", sa.Text, nullable=False),
        sa.Column("plan", sa.Text, nullable=False),
        sa.Column("run_uid", sa.Text, nullable=False),
        sa.Column("direction", sa.Text, nullable=False),
        sa.Column("magnitude", sa.Float, nullable=False),
        sa.Column("pvalue", sa.Float, nullable=False),
        sa.Column("reported", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("metric", "device_type", "plan", "run_uid",
                                name="change_points_pkey"),
    )


def downgrade() -> None:
    op.drop_table("change_points")
    op.drop_index("results_series", "results")
    op.drop_table("results")
