"""run_conditions: what each run's steps were measured under

One row per (run, A/B side, step): over the step's counted iterations, the lowest, median and
highest current CPU frequency (MHz), the governors, the temperature range (°C), the mean average
power (W) and whether the source was simulated (core.statistics.measured). A change point reads
those of the runs on either side of it. Runs indexed before this revision have none until
`results reindex`.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    op.create_table(
        "run_conditions",
        sa.Column("run_uid", sa.Text, nullable=False),
        sa.Column("side", sa.Text, nullable=False, server_default=""),
        sa.Column("step", sa.Text, nullable=False),
        sa.Column("namespace", sa.Text, nullable=False),
        sa.Column("iterations", sa.Integer, nullable=False),
        sa.Column("min_mhz", sa.Float),
        sa.Column("median_mhz", sa.Float),
        sa.Column("max_mhz", sa.Float),
        sa.Column("governors", ARRAY(sa.Text), nullable=False, server_default="{}"),
        sa.Column("min_temp_c", sa.Float),
        sa.Column("max_temp_c", sa.Float),
        sa.Column("mean_power_w", sa.Float),
        sa.Column("simulated", sa.Boolean, nullable=False, server_default="false"),
        sa.PrimaryKeyConstraint("run_uid", "side", "step", name="run_conditions_pkey"),
        if_not_exists=True)


def downgrade() -> None:
    op.drop_table("run_conditions")
