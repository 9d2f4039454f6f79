"""notification_outbox: the notifier's durable outbox

One row per delivery of a Notification's event to one target, until it is delivered or given
up. Created only where it is missing: `results reindex --drop` drops the index's tables and
Alembic's version, never the outbox, and migrates from 0001 again.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    op.create_table(
        "notification_outbox",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("namespace", sa.Text, nullable=False),
        sa.Column("notification", sa.Text, nullable=False),
        sa.Column("notification_uid", sa.Text, nullable=False),
        sa.Column("target", sa.Text, nullable=False),
        sa.Column("event_kind", sa.Text, nullable=False),
        sa.Column("subject", sa.Text, nullable=False),
        sa.Column("body", JSONB, nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("occurred", sa.DateTime(timezone=True), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_attempt", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_attempt", sa.DateTime(timezone=True)),
        sa.Column("delivered", sa.DateTime(timezone=True)),
        sa.Column("failed", sa.DateTime(timezone=True)),
        sa.Column("last_error", sa.Text, nullable=False, server_default=""),
        if_not_exists=True)
    op.create_index("notification_outbox_due", "notification_outbox", ["next_attempt"],
                    postgresql_where=sa.text("delivered IS NULL AND failed IS NULL"),
                    if_not_exists=True)
    op.create_index("notification_outbox_by_notification", "notification_outbox",
                    ["notification_uid", "created"], if_not_exists=True)


def downgrade() -> None:
    op.drop_table("notification_outbox")
