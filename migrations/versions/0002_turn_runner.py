"""turn runner id and heartbeat

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"


def upgrade() -> None:
    with op.batch_alter_table("turns", schema=None) as batch_op:
        batch_op.add_column(sa.Column("runner_id", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("turns", schema=None) as batch_op:
        batch_op.drop_column("heartbeat_at")
        batch_op.drop_column("runner_id")
