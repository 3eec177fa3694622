"""stored stop requests of running turns

A stop is stored on its turn before it is acknowledged, so the replica running the turn sees
it by polling even when the broker that normally tells it is down.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02 00:10:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"


def upgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.add_column(sa.Column("stop_requested_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("stop_requested_at")
