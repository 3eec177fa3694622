"""attachment tombstones and duplicate lookup

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 09:00:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"


def upgrade() -> None:
    with op.batch_alter_table("attachments", schema=None) as batch_op:
        batch_op.add_column(sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index("ix_attachments_owner_sha256", ["owner_id", "sha256"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("attachments", schema=None) as batch_op:
        batch_op.drop_index("ix_attachments_owner_sha256")
        batch_op.drop_column("deleted_at")
