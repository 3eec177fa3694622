"""Where a conversation's title comes from

`conversations.title_source`: `user` (named by its owner or an API client, as every existing
conversation was), `fallback` (the first line of the first message, until a generated title
replaces it after the first reply) or `generated`. A rename makes it `user` again, and a
generated title never overwrites one.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-02 16:35:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"


def upgrade() -> None:
    # Not in batch mode: both databases add (and drop) a plain column in place.
    op.add_column(
        "conversations",
        sa.Column("title_source", sa.String(16), nullable=False, server_default="user"),
    )


def downgrade() -> None:
    op.drop_column("conversations", "title_source")
