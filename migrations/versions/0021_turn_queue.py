"""Turns on a job queue

On PostgreSQL turns run as jobs of procrastinate (`backend.services.delivery.job_queue`): its
schema (tables, types, functions and triggers, all named `procrastinate_*`) is created here,
at the version `requirements.lock` pins. The queue's worker heartbeats and stalled-job retry
replace the turns' own heartbeat, so `turns.runner_id` and `turns.heartbeat_at` go. SQLite
keeps one process that runs every turn and needs no queue.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06 19:45:00.000000
"""

import sqlalchemy as sa
from alembic import op
from procrastinate.schema import SchemaManager

revision: str = "0021"
down_revision: str | None = "0020"


def upgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("runner_id")
        batch.drop_column("heartbeat_at")
    if op.get_bind().dialect.name == "postgresql":
        # Many statements in one: asyncpg runs them with its simple query protocol.
        schema = SchemaManager.get_schema()
        op.get_bind().connection.dbapi_connection.run_async(lambda raw: raw.execute(schema))


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        for kind, names in (
            ("TABLE", "SELECT tablename FROM pg_tables WHERE tablename LIKE 'procrastinate%'"),
            (
                "FUNCTION",
                "SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.proname LIKE 'procrastinate%'",
            ),
            # Its enums and composite types (the tables' own row types went with them).
            (
                "TYPE",
                "SELECT typname FROM pg_type WHERE typname LIKE 'procrastinate%' AND typtype IN ('e', 'c')",
            ),
        ):
            for (name,) in bind.exec_driver_sql(names).all():
                bind.exec_driver_sql(f"DROP {kind} IF EXISTS {name} CASCADE")
    with op.batch_alter_table("turns") as batch:
        batch.add_column(sa.Column("runner_id", sa.String(64), nullable=True))
        batch.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))
