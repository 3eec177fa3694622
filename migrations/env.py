"""Alembic environment: runs migrations over the async engine for SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from backend.db import create_engine
from backend.models import Base

target_metadata = Base.metadata
# The message search indexes (migrations 0010 and 0022) are kept by the database itself,
# through triggers (the tables `message_search` and `message_search_*`) and a trigram index on
# PostgreSQL; no model declares them.
SEARCH_INDEX_TABLE = "message_search"
SEARCH_INDEX = "ix_messages_search_trgm"


# The job queue's own schema (migration 0021): procrastinate's tables, not our models.
QUEUE_TABLES = "procrastinate_"


def _include_name(name: str | None, type_: str, parent_names: object) -> bool:
    if type_ == "table" and name is not None:
        return (
            name != SEARCH_INDEX_TABLE
            and not name.startswith(f"{SEARCH_INDEX_TABLE}_")
            and not name.startswith(QUEUE_TABLES)
        )
    return not (type_ == "index" and name == SEARCH_INDEX)


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_name=_include_name,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_async() -> None:
    engine = create_engine(context.config.get_main_option("sqlalchemy.url") or "")
    async with engine.connect() as connection:
        if connection.dialect.name == "sqlite":
            # Batch migrations rebuild a table (copy, drop, rename); with foreign keys enforced
            # the drop would cascade and empty every table that references it. Outside a
            # transaction, as SQLite requires for this pragma.
            await connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
        await connection.run_sync(_run)
        await connection.commit()
    await engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline SQL generation is not supported; run against a database")
asyncio.run(_run_async())
