"""Database engine, sessions and the schema-version check."""

from __future__ import annotations

import asyncio
import sqlite3
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry, PoolResetState

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class SchemaNotReady(RuntimeError):
    """The database is missing or behind the code's migrations."""


def create_engine(url: str, *, sqlite_busy_timeout: float = 30.0) -> AsyncEngine:
    """`sqlite_busy_timeout`: how long a SQLite writer waits for the write lock before the
    request fails with `database_busy` (503); PostgreSQL has row locks and no such wait.

    SQL parameters (message text, password hashes, token digests) never reach a log line or an
    error message: `hide_parameters`."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        # Connections are cheap; writers serialize in SQLite itself (WAL, busy timeout).
        engine = create_async_engine(
            url,
            connect_args={"timeout": sqlite_busy_timeout},
            pool_size=20,
            max_overflow=80,
            hide_parameters=True,
            pool_reset_on_return=None,  # `_sqlite_reset` instead
        )
        event.listen(engine.sync_engine, "connect", partial(_sqlite_pragmas, sqlite_busy_timeout))
        event.listen(engine.sync_engine.pool, "reset", _sqlite_reset)
        _install_write_gate(engine, sqlite_busy_timeout)
        return engine
    return create_async_engine(url, pool_size=20, max_overflow=20, pool_pre_ping=True, hide_parameters=True)


def _sqlite_pragmas(busy_timeout: float, dbapi_connection: object, _record: object) -> None:
    # WAL lets readers (SSE replay) run beside the turn writer; foreign keys enforce cascades.
    cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
    cursor.close()


def _sqlite_reset(dbapi_connection: Any, _record: ConnectionPoolEntry, state: PoolResetState) -> None:
    """What the pool's rollback-on-return does, for a connection still in a transaction only.

    SQLAlchemy rolls back a connection whose transaction has just committed too; with aiosqlite
    each rollback is a round trip to the driver's thread, one of five per event-log commit."""
    if state.transaction_was_reset or state.terminate_only or not state.asyncio_safe:
        return
    try:
        in_transaction = dbapi_connection.driver_connection.in_transaction
    except ValueError:  # closed: the rollback fails and the pool discards the connection
        in_transaction = True
    if in_transaction:
        dbapi_connection.rollback()


# Marks a pooled connection whose transaction holds the write gate (in the pool record's info).
_GATE_HELD = "chat_shell_write_gate"
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


class WriteGate:
    """One SQLite writer at a time in this process, queued in the event loop.

    SQLite has one write lock. A writer that finds it taken sleeps in SQLite's busy handler, in
    steps of 1 to 100 ms, and does not wake when the lock frees: a burst of concurrent sends
    made the event log's commits (and every token behind them) wait about a second. Here a
    transaction takes the gate at its first write statement and gives it back when its
    connection returns to the pool (after the commit or rollback), in FIFO order; a writer on
    the driver itself (the event log's frames) takes it around its transaction. Writers in
    other processes still meet the busy handler. Waiting longer than the busy timeout fails
    like a locked database (503 `database_busy`).
    """

    def __init__(self, timeout: float) -> None:
        self._lock = asyncio.Lock()
        self._timeout = timeout

    async def acquire(self, statement: str = "", parameters: Any = None) -> None:
        try:
            await asyncio.wait_for(self._lock.acquire(), self._timeout)
        except TimeoutError:
            locked = sqlite3.OperationalError("database is locked")
            raise OperationalError(statement, parameters, locked) from None

    def release(self) -> None:
        self._lock.release()


_gates: weakref.WeakKeyDictionary[Engine, WriteGate] = weakref.WeakKeyDictionary()


def write_gate(engine: AsyncEngine) -> WriteGate | None:
    """The engine's write gate (SQLite), or None (PostgreSQL has row locks and needs none)."""
    return _gates.get(engine.sync_engine)


def _install_write_gate(engine: AsyncEngine, timeout: float) -> None:
    gate = _gates[engine.sync_engine] = WriteGate(timeout)

    def before_execute(conn: Connection, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        proxied = conn.connection
        if proxied.info.get(_GATE_HELD) or not statement.lstrip()[:7].upper().startswith(_WRITES):
            return
        proxied.dbapi_connection.run_async(lambda _driver: gate.acquire(statement, parameters))  # type: ignore[union-attr]
        proxied.info[_GATE_HELD] = True

    def returned(_dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
        if record.info.pop(_GATE_HELD, False):
            gate.release()

    event.listen(engine.sync_engine, "before_cursor_execute", before_execute)
    event.listen(engine.sync_engine.pool, "checkin", returned)
    event.listen(engine.sync_engine.pool, "invalidate", lambda conn, record, _exc: returned(conn, record))


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
