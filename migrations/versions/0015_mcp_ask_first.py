"""MCP servers and tools a conversation marked "ask first"

`conversations.mcp_ask_first`: names of MCP servers, or of their tools as the model sees them
(`<server>_<tool>`), whose calls wait for the user's decision (docs/features.md "MCP servers"); NULL, as
every existing conversation starts, means none.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02 03:50:00.000000
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0015"
down_revision: str | None = "0014"


def upgrade() -> None:
    json_doc = sa.JSON().with_variant(JSONB(), "postgresql")
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("mcp_ask_first", json_doc, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.drop_column("mcp_ask_first")
