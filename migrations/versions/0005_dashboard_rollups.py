"""hourly rollups for the operators' dashboard

`turn_hours` and `compaction_hours` hold per hour x model profile x value bin the sums the
dashboard reads for windows made of whole hours (see backend/models/rollups.py); they are
backfilled here from the rows already stored, with the same figures the running service adds.
`conversation_pressure` holds each conversation's latest measured turn (the pressure table).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 11:00:00.000000
"""

import sqlalchemy as sa
from alembic import op

from backend.services.dashboard.percentiles import bin_case

revision: str = "0005"
down_revision: str | None = "0004"

NO_BIN = -1

turns = sa.table(
    "turns",
    sa.column("id", sa.Integer),
    sa.column("conversation_id", sa.Integer),
    sa.column("started_at", sa.DateTime(timezone=True)),
    sa.column("model_profile", sa.String),
    sa.column("status", sa.String),
    sa.column("context_used_tokens", sa.Integer),
    sa.column("context_available_tokens", sa.Integer),
    sa.column("ttft_ms", sa.Float),
    sa.column("refused", sa.Boolean),
    sa.column("overflow_errors", sa.Integer),
)
compactions = sa.table(
    "compaction_events",
    sa.column("created_at", sa.DateTime(timezone=True)),
    sa.column("model_profile", sa.String),
    sa.column("strategy", sa.String),
    sa.column("status", sa.String),
    sa.column("tokens_saved", sa.Integer),
    sa.column("duration_ms", sa.Float),
    sa.column("retention_score", sa.Float),
)


def _hour(column: sa.ColumnElement, dialect: str) -> sa.ColumnElement[int]:
    """Whole hours since the Unix epoch, exactly (no floating point at hour boundaries)."""
    if dialect == "sqlite":
        return sa.cast(sa.func.strftime("%s", column), sa.Integer) // 3600
    return sa.cast(sa.func.floor(sa.extract("epoch", column) / 3600), sa.Integer)


def _create_tables() -> tuple[sa.Table, sa.Table, sa.Table]:
    turn_hours = op.create_table(
        "turn_hours",
        sa.Column("hour", sa.Integer(), nullable=False),
        sa.Column("model_profile", sa.String(length=100), nullable=False),
        sa.Column("ttft_bin", sa.Integer(), nullable=False),
        sa.Column("turns", sa.Integer(), nullable=False),
        sa.Column("utilization_sum", sa.Float(), nullable=False),
        sa.Column("utilization_count", sa.Integer(), nullable=False),
        sa.Column("utilization_max", sa.Float(), nullable=True),
        sa.Column("refusals", sa.Integer(), nullable=False),
        sa.Column("overflow_errors", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.Column("ttft_min", sa.Float(), nullable=True),
        sa.Column("ttft_max", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("hour", "model_profile", "ttft_bin", name=op.f("pk_turn_hours")),
    )
    compaction_hours = op.create_table(
        "compaction_hours",
        sa.Column("hour", sa.Integer(), nullable=False),
        sa.Column("model_profile", sa.String(length=100), nullable=False),
        sa.Column("strategy", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("duration_bin", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("tokens_saved", sa.BigInteger(), nullable=False),
        sa.Column("retention_sum", sa.Float(), nullable=False),
        sa.Column("retention_count", sa.Integer(), nullable=False),
        sa.Column("retention_min", sa.Float(), nullable=True),
        sa.Column("duration_min", sa.Float(), nullable=True),
        sa.Column("duration_max", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint(
            "hour", "model_profile", "strategy", "status", "duration_bin", name=op.f("pk_compaction_hours")
        ),
    )
    pressure = op.create_table(
        "conversation_pressure",
        sa.Column("conversation_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("turn_id", sa.BigInteger(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("utilization", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_conversation_pressure_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("conversation_id", name=op.f("pk_conversation_pressure")),
    )
    op.create_index(
        op.f("ix_conversation_pressure_utilization"), "conversation_pressure", ["utilization"], unique=False
    )
    assert turn_hours is not None and compaction_hours is not None and pressure is not None
    return turn_hours, compaction_hours, pressure


def upgrade() -> None:
    turn_hours, compaction_hours, pressure = _create_tables()
    dialect = op.get_bind().dialect.name

    hour = _hour(turns.c.started_at, dialect)
    profile = sa.func.coalesce(turns.c.model_profile, "")
    ttft_bin = sa.func.coalesce(bin_case(turns.c.ttft_ms), NO_BIN)
    utilization = sa.cast(turns.c.context_used_tokens, sa.Float) / sa.func.nullif(
        turns.c.context_available_tokens, 0
    )
    op.execute(
        turn_hours.insert().from_select(
            [c.name for c in turn_hours.c],
            sa.select(
                hour,
                profile,
                ttft_bin,
                sa.func.count(),
                sa.func.coalesce(sa.func.sum(utilization), 0.0),
                sa.func.count(utilization),
                sa.func.max(utilization),
                sa.func.sum(sa.case((turns.c.refused, 1), else_=0)),
                sa.func.coalesce(sa.func.sum(turns.c.overflow_errors), 0),
                sa.func.sum(sa.case((turns.c.status == "failed", 1), else_=0)),
                sa.func.min(turns.c.ttft_ms),
                sa.func.max(turns.c.ttft_ms),
            ).group_by(hour, profile, ttft_bin),
        )
    )

    hour = _hour(compactions.c.created_at, dialect)
    profile = sa.func.coalesce(compactions.c.model_profile, "")
    duration_bin = sa.func.coalesce(bin_case(compactions.c.duration_ms), NO_BIN)
    op.execute(
        compaction_hours.insert().from_select(
            [c.name for c in compaction_hours.c],
            sa.select(
                hour,
                profile,
                compactions.c.strategy,
                compactions.c.status,
                duration_bin,
                sa.func.count(),
                sa.func.coalesce(sa.func.sum(compactions.c.tokens_saved), 0),
                sa.func.coalesce(sa.func.sum(compactions.c.retention_score), 0.0),
                sa.func.count(compactions.c.retention_score),
                sa.func.min(compactions.c.retention_score),
                sa.func.min(compactions.c.duration_ms),
                sa.func.max(compactions.c.duration_ms),
            ).group_by(hour, profile, compactions.c.strategy, compactions.c.status, duration_bin),
        )
    )

    latest = (
        sa.select(sa.func.max(turns.c.id))
        .where(turns.c.context_used_tokens.is_not(None))
        .group_by(turns.c.conversation_id)
    )
    op.execute(
        pressure.insert().from_select(
            ["conversation_id", "turn_id", "started_at", "utilization"],
            sa.select(turns.c.conversation_id, turns.c.id, turns.c.started_at, utilization).where(
                turns.c.id.in_(latest)
            ),
        )
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_conversation_pressure_utilization"), table_name="conversation_pressure")
    op.drop_table("conversation_pressure")
    op.drop_table("compaction_hours")
    op.drop_table("turn_hours")
