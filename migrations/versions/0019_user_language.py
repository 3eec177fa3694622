"""The language a user picked for the page

`users.language`: a BCP 47 tag of one of the page's catalogs ("en", "zh-CN"); NULL, as every
existing account starts, means the page follows the browser's `Accept-Language`.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-02 06:50:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("language", sa.String(16), nullable=True))


def downgrade() -> None:
    # Not in batch mode: rebuilding `users` on SQLite would lose its expression index
    # (lower(username), 0006); SQLite 3.35+ drops a plain column in place.
    op.drop_column("users", "language")
