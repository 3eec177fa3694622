"""Database engine, sessions and the schema-version check."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class SchemaNotReady(RuntimeError):
    """The database is missing or behind the code's migrations."""


def create_engine(url: str, *, sqlite_busy_timeout: float = 30.0) -> AsyncEngine:
    """`sqlite_busy_timeout`: how long a SQLite writer waits for the write lock before the
    request fails with `database_busy` (503); PostgreSQL has row locks and no such wait."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        # Connections are cheap; writers serialize in SQLite itself (WAL, busy timeout).
        engine = create_async_engine(
            url, connect_args={"timeout": sqlite_busy_timeout}, pool_size=20, max_overflow=80
        )
        event.listen(engine.sync_engine, "connect", partial(_sqlite_pragmas, sqlite_busy_timeout))
        return engine
    return create_async_engine(url, pool_size=20, max_overflow=20, pool_pre_ping=True)


def _sqlite_pragmas(busy_timeout: float, dbapi_connection: object, _record: object) -> None:
    # WAL lets readers (SSE replay) run beside the turn writer; foreign keys enforce cascades.
    cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
    cursor.close()


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


@asynccontextmanager
async def transaction(factory: async_sessionmaker[AsyncSession]) -> AsyncIterator[AsyncSession]:
    """A session whose work commits on success and rolls back on any error."""
    async with factory() as session, session.begin():
        yield session


def alembic_config(url: str) -> Config:
    config = Config(str(PROJECT_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(PROJECT_ROOT / "migrations"))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


async def check_schema(engine: AsyncEngine) -> None:
    """Refuse to serve on a database that has not been migrated to the code's head."""

    def current(connection: Connection) -> str | None:
        return MigrationContext.configure(connection).get_current_revision()

    async with engine.connect() as connection:
        revision = await connection.run_sync(current)
    head = head_revision()
    if revision != head:
        raise SchemaNotReady(
            f"database schema is at revision {revision or 'none'}, the code needs {head}; "
            "run `chat-shell migrate` (make run does this for you)"
        )
