"""SQLite writers of one process queue in the event loop, not in SQLite's busy handler (which
sleeps in steps of up to 100 ms and made a burst of sends stall the event log for a second)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.db import create_engine, session_factory


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'gate.db'}", sqlite_busy_timeout=0.5)
    async with engine.begin() as connection:
        await connection.execute(text("CREATE TABLE items (n INTEGER)"))
    yield engine
    await engine.dispose()


def _sent_to_sqlite(engine: AsyncEngine) -> list[int]:
    """The value of every INSERT that reached the driver (listeners run in order, so this one
    runs after the gate has let the statement through)."""
    sent: list[int] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.startswith("INSERT"):
            sent.append(parameters[0])

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    return sent


async def _insert(
    engine: AsyncEngine, n: int, *, written: asyncio.Event | None = None, hold: asyncio.Event | None = None
) -> None:
    async with session_factory(engine)() as db, db.begin():
        await db.execute(text("INSERT INTO items VALUES (:n)"), {"n": n})
        if written is not None:
            written.set()
        if hold is not None:
            await hold.wait()


async def _items(engine: AsyncEngine) -> list[int]:
    async with engine.connect() as connection:
        return list((await connection.execute(text("SELECT n FROM items ORDER BY n"))).scalars())


async def test_a_second_writer_waits_for_the_first_to_commit_before_reaching_sqlite(
    engine: AsyncEngine,
) -> None:
    sent = _sent_to_sqlite(engine)
    written, release = asyncio.Event(), asyncio.Event()
    first = asyncio.create_task(_insert(engine, 1, written=written, hold=release))
    await written.wait()
    second = asyncio.create_task(_insert(engine, 2))
    await asyncio.sleep(0.3)

    assert sent == [1]  # the second write waits here, not inside SQLite
    release.set()
    await asyncio.wait_for(asyncio.gather(first, second), 5)
    assert sent == [1, 2]
    assert await _items(engine) == [1, 2]


async def test_a_writer_waiting_past_the_busy_timeout_fails_like_a_locked_database(
    engine: AsyncEngine,
) -> None:
    written, release = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(_insert(engine, 1, written=written, hold=release))
    await written.wait()

    with pytest.raises(OperationalError, match="database is locked"):
        await _insert(engine, 2)
    release.set()
    await holder
    await _insert(engine, 3)
    assert await _items(engine) == [1, 3]


async def test_a_failed_write_transaction_gives_the_gate_back(engine: AsyncEngine) -> None:
    with pytest.raises(RuntimeError):
        async with session_factory(engine)() as db, db.begin():
            await db.execute(text("INSERT INTO items VALUES (1)"))
            raise RuntimeError("the request failed after writing")

    await asyncio.wait_for(_insert(engine, 2), 5)
    assert await _items(engine) == [2]
