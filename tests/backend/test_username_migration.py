"""Migration 0006 on a database that already holds look-alike usernames, on SQLite and PostgreSQL:
the oldest account keeps its name, later ones get a predictable new name, and from then on a
name differing only in case is refused by the database itself."""

from __future__ import annotations

import asyncio

import pytest
from alembic import command
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from backend.db import alembic_config, create_engine

BEFORE = [
    (1, "alice"),
    (2, "Alice"),
    (3, "bob"),
    (4, "ALICE"),
    # Already holds the name the renaming would pick for id 2.
    (5, "alice-2"),
    (6, "B" + "o" * 63),
    (7, "b" + "O" * 63),
]
AFTER = {
    1: "alice",
    2: "Alice-2-1",
    3: "bob",
    4: "ALICE-4",
    5: "alice-2",
    6: "B" + "o" * 63,
    7: "b" + "O" * 61 + "-7",
}


async def _execute(url: str, statements: list[tuple[str, dict[str, object]]]) -> list[tuple[int, str]]:
    engine = create_engine(url)
    try:
        async with engine.begin() as connection:
            for statement, values in statements:
                await connection.execute(text(statement), values)
        async with engine.connect() as connection:
            rows = await connection.execute(text("SELECT id, username FROM users ORDER BY id"))
            return [(row.id, row.username) for row in rows]
    finally:
        await engine.dispose()


INSERT = (
    "INSERT INTO users (id, username, password_hash, is_operator, created_at) "
    "VALUES (:id, :username, 'x', false, CURRENT_TIMESTAMP)"
)


def test_look_alikes_are_renamed_and_then_refused(unmigrated_url: str) -> None:
    config = alembic_config(unmigrated_url)
    command.upgrade(config, "0005")
    asyncio.run(_execute(unmigrated_url, [(INSERT, {"id": i, "username": name}) for i, name in BEFORE]))

    command.upgrade(config, "head")
    rows = asyncio.run(_execute(unmigrated_url, []))
    assert dict(rows) == AFTER
    assert len({name.lower() for _, name in rows}) == len(rows)

    with pytest.raises(IntegrityError):
        asyncio.run(_execute(unmigrated_url, [(INSERT, {"id": 10, "username": "BOB"})]))
    asyncio.run(_execute(unmigrated_url, [(INSERT, {"id": 11, "username": "carol"})]))

    command.downgrade(config, "0005")
    asyncio.run(_execute(unmigrated_url, [(INSERT, {"id": 12, "username": "CAROL"})]))
