"""covering indexes for the operators' dashboard

The dashboard aggregates a time window of `turns` and `compaction_events`; these indexes hold
every column those queries read, so they scan the index alone (no table row lookups). They
replace the single-column time indexes they start with.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 10:00:00.000000
"""

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"

TURN_COLUMNS = [
    "started_at",
    "conversation_id",
    "context_used_tokens",
    "context_available_tokens",
    "ttft_ms",
    "refused",
    "overflow_errors",
    "status",
]
COMPACTION_COLUMNS = [
    "created_at",
    "strategy",
    "status",
    "tokens_saved",
    "duration_ms",
    "retention_score",
    "conversation_id",
]


def upgrade() -> None:
    with op.batch_alter_table("turns", schema=None) as batch_op:
        batch_op.create_index("ix_turns_dashboard", TURN_COLUMNS, unique=False)
        batch_op.drop_index("ix_turns_started_at")
    with op.batch_alter_table("compaction_events", schema=None) as batch_op:
        batch_op.create_index("ix_compaction_events_dashboard", COMPACTION_COLUMNS, unique=False)
        batch_op.drop_index("ix_compaction_events_created_at")


def downgrade() -> None:
    with op.batch_alter_table("compaction_events", schema=None) as batch_op:
        batch_op.create_index("ix_compaction_events_created_at", ["created_at"], unique=False)
        batch_op.drop_index("ix_compaction_events_dashboard")
    with op.batch_alter_table("turns", schema=None) as batch_op:
        batch_op.create_index("ix_turns_started_at", ["started_at"], unique=False)
        batch_op.drop_index("ix_turns_dashboard")
