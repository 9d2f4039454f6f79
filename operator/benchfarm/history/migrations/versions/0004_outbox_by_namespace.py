"""notification_outbox by namespace: what a namespace had queued in the last hour

The notifier counts a namespace's deliveries queued in the hour before each new one (the
LabPolicy's maxDeliveriesPerHour); this index answers that without reading the whole outbox.
Created only where it is missing, as 0003's table (`results reindex --drop` migrates from 0001
again and leaves the outbox alone).

Revision ID: 0004
Revises: 0003
"""

from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    op.create_index("notification_outbox_by_namespace", "notification_outbox",
                    ["namespace", "created"], if_not_exists=True)


def downgrade() -> None:
    op.drop_index("notification_outbox_by_namespace", table_name="notification_outbox")
