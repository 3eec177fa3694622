"""the MCP servers a conversation enabled

`conversations.mcp_servers`: the names of the MCP servers a conversation uses (docs/features.md "MCP
servers"); NULL, as every existing conversation starts, means the deployment's default set.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 23:50:00.000000
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0008"
down_revision: str | None = "0007"


def upgrade() -> None:
    json_doc = sa.JSON().with_variant(JSONB(), "postgresql")
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("mcp_servers", json_doc, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.drop_column("mcp_servers")
