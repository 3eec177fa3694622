"""read-only share links of a conversation

`share_links`: a token (256 random bits) that lets anyone read the path of a conversation as it
was when the link was made (ending at `leaf_pk`), attachments' names only when the owner chose
so, until `revoked_at`.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02 07:10:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "share_links",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("token", sa.String(length=64), nullable=False),
        sa.Column("conversation_id", BIG_ID, nullable=False),
        sa.Column("leaf_pk", BIG_ID, nullable=False),
        sa.Column("include_attachments", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_share_links_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_share_links")),
        sa.UniqueConstraint("token", name=op.f("uq_share_links_token")),
    )
    op.create_index(op.f("ix_share_links_conversation_id"), "share_links", ["conversation_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_share_links_conversation_id"), table_name="share_links")
    op.drop_table("share_links")
