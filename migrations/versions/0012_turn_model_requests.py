"""the model requests of a turn, as sent (issue 19)

`turns.model_requests` holds every model call's request of the conversation's latest turn,
compactly (each distinct text once, entries by hash; the operator's system prompt by hash
only). Earlier turns' requests are cleared when a later turn of the conversation finishes.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01 23:45:00.000000
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0012"
down_revision: str | None = "0011"


def upgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.add_column(
            sa.Column(
                "model_requests",
                sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
                nullable=True,
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("model_requests")
