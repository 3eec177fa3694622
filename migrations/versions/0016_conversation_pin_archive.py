"""Pinned and archived conversations

`conversations.pinned_at` and `conversations.archived_at`: when the owner pinned (listed first)
or archived (left out of the list unless asked for) a conversation; NULL, as every existing
conversation starts, means neither.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02 06:50:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"


def upgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("pinned_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("archived_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.drop_column("archived_at")
        batch.drop_column("pinned_at")
