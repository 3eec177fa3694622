"""Real test databases: a migrated SQLite file per test, and a PostgreSQL database per session."""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import asyncpg
from alembic import command
from sqlalchemy import select, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
from sqlalchemy.orm import aliased

from backend.db import alembic_config, create_engine
from backend.models import Base, Conversation, Message
from backend.models.base import utcnow

POSTGRES_ADMIN_URL = os.environ.get(
    "CHAT_SHELL_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
)


def migrate(url: str) -> None:
    command.upgrade(alembic_config(url), "head")


def sqlite_template(directory: Path) -> Path:
    path = directory / "template.db"
    migrate(f"sqlite+aiosqlite:///{path}")
    return path


def sqlite_copy(template: Path, directory: Path) -> str:
    path = directory / f"{uuid.uuid4().hex}.db"
    shutil.copyfile(template, path)
    return f"sqlite+aiosqlite:///{path}"


def asyncpg_dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def postgres_available() -> bool:
    try:
        connection = await asyncpg.connect(asyncpg_dsn(POSTGRES_ADMIN_URL), timeout=5)
    except (OSError, asyncpg.PostgresError):
        return False
    await connection.close()
    return True


async def create_postgres_database() -> str:
    name = f"chat_shell_test_{uuid.uuid4().hex[:12]}"
    connection = await asyncpg.connect(asyncpg_dsn(POSTGRES_ADMIN_URL))
    try:
        await connection.execute(f'CREATE DATABASE "{name}"')
    finally:
        await connection.close()
    return make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)


async def drop_postgres_database(url: str) -> None:
    name = make_url(url).database
    connection = await asyncpg.connect(asyncpg_dsn(POSTGRES_ADMIN_URL))
    try:
        await connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await connection.close()


@contextmanager
def scratch_postgres() -> Iterator[str | None]:
    """A new, empty PostgreSQL database for a benchmark (None when the server is not
    reachable), dropped afterwards. For synchronous callers: each step runs its own loop."""
    if not asyncio.run(postgres_available()):
        yield None
        return
    url = asyncio.run(create_postgres_database())
    try:
        yield url
    finally:
        asyncio.run(drop_postgres_database(url))


@asynccontextmanager
async def migrated_postgres() -> AsyncIterator[str | None]:
    """A new, migrated PostgreSQL database for a benchmark (None when the server is not
    reachable), dropped afterwards."""
    if not await postgres_available():
        yield None
        return
    url = await create_postgres_database()
    try:
        await asyncio.to_thread(migrate, url)
        yield url
    finally:
        await drop_postgres_database(url)


async def migrated_sqlite(directory: Path) -> str:
    """A migrated SQLite database in `directory`, for a benchmark."""
    return sqlite_copy(await asyncio.to_thread(sqlite_template, directory), directory)


@asynccontextmanager
async def engine_for(url: str) -> AsyncIterator[AsyncEngine]:
    """An engine of the test's own on `url` (to read or change what the app stored), disposed after."""
    engine = create_engine(url)
    try:
        yield engine
    finally:
        await engine.dispose()


@asynccontextmanager
async def plain_sql(url: str) -> AsyncIterator[AsyncConnection]:
    """One transaction in plain SQL: for a database at an older revision than the ORM models
    describe, as the migration tests seed and read it."""
    async with engine_for(url) as engine, engine.begin() as connection:
        yield connection


async def insert_first_user(connection: AsyncConnection, username: str) -> None:
    """User 1, in the columns every revision since the first has."""
    await connection.execute(
        text(
            "INSERT INTO users (id, username, password_hash, is_operator, created_at) "
            "VALUES (1, :username, 'x', false, CURRENT_TIMESTAMP)"
        ),
        {"username": username},
    )


async def truncate_all(url: str) -> None:
    """Empty every table (and restart ids) so each test starts from a clean, migrated schema."""
    engine = create_engine(url)
    tables = ", ".join(f'"{table.name}"' for table in Base.metadata.sorted_tables)
    async with engine.begin() as connection:
        await connection.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
    await engine.dispose()


async def chain_messages(db: AsyncSession, conversation_id: int) -> None:
    """Rows inserted in bulk become one path: each message follows the one numbered before it,
    and the newest is the conversation's leaf (what migration 0014 makes of older ones)."""
    earlier = aliased(Message)
    await db.execute(
        update(Message)
        .where(Message.conversation_id == conversation_id)
        .values(
            parent_pk=select(earlier.id)
            .where(earlier.conversation_id == conversation_id, earlier.message_id < Message.message_id)
            .order_by(earlier.message_id.desc())
            .limit(1)
            .scalar_subquery()
        )
    )
    newest = select(Message.id).where(Message.conversation_id == conversation_id)
    await db.execute(
        update(Conversation)
        .where(Conversation.id == conversation_id)
        .values(
            updated_at=utcnow(),
            current_leaf_pk=newest.order_by(Message.message_id.desc()).limit(1).scalar_subquery(),
        )
    )
