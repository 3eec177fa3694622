"""a conversation's own instructions, and each user's saved presets

`conversations.instructions` is the conversation's system prompt (after the operator's); a
preset (`presets`) is a name, instructions and a model a user starts new chats from.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 23:45:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("conversations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("instructions", sa.Text(), nullable=True))
    op.create_table(
        "presets",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("owner_id", BIG_ID, nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("instructions", sa.Text(), nullable=False),
        sa.Column("model_profile", sa.String(length=100), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["users.id"], name=op.f("fk_presets_owner_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_presets")),
        sa.UniqueConstraint("owner_id", "name", name="uq_presets_owner_name"),
    )


def downgrade() -> None:
    op.drop_table("presets")
    with op.batch_alter_table("conversations", schema=None) as batch_op:
        batch_op.drop_column("instructions")
