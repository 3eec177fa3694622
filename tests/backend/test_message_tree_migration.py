"""Migration 0014 on a database that already holds conversations and forks, on SQLite and
PostgreSQL: each conversation becomes a single-path tree (a message follows the one before it,
a fork's first message follows the fork point), the newest message is the leaf, and the page
reads exactly what it read before."""

from __future__ import annotations

import asyncio

from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import text

from backend.db import alembic_config, create_engine, session_factory
from backend.models import Conversation
from backend.services.conversations import messages
from tests.support.databases import insert_first_user, plain_sql

TREE_REVISION = "0014"


CONVERSATION = (
    "INSERT INTO conversations (id, owner_id, title, created_at, updated_at, next_message_id, "
    "forked_from_conversation_id, forked_from_message_id) "
    "VALUES (:id, 1, :title, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, :next, :parent, :at)"
)
MESSAGE = (
    "INSERT INTO messages (id, conversation_id, message_id, role, status, content, has_checkpoint, "
    "created_at, updated_at) VALUES (:id, :c, :n, :role, 'completed', :content, false, "
    "CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
)


async def _seed_old(url: str) -> None:
    async with plain_sql(url) as connection:
        await insert_first_user(connection, "old")
        for row in (
            {"id": 1, "title": "root", "next": 5, "parent": None, "at": None},
            {"id": 2, "title": "fork at 2", "next": 5, "parent": 1, "at": 2},
            {"id": 3, "title": "fork of the fork, no messages", "next": 5, "parent": 2, "at": 4},
            {"id": 4, "title": "fork at 1 of the fork (inherited)", "next": 2, "parent": 2, "at": 1},
            {"id": 5, "title": "empty", "next": 1, "parent": None, "at": None},
        ):
            await connection.execute(text(CONVERSATION), row)
        for pk, c, n in ((10, 1, 1), (11, 1, 2), (12, 1, 3), (13, 1, 4), (20, 2, 3), (21, 2, 4)):
            role = "user" if n % 2 else "assistant"
            await connection.execute(
                text(MESSAGE), {"id": pk, "c": c, "n": n, "role": role, "content": f"{c}:{n}"}
            )


async def _read(url: str) -> tuple[dict[int, int | None], dict[int, int | None], dict[int, list[str]]]:
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            parents = dict((await connection.execute(text("SELECT id, parent_pk FROM messages"))).all())
            leaves = dict(
                (await connection.execute(text("SELECT id, current_leaf_pk FROM conversations"))).all()
            )
        shown = {}
        async with session_factory(engine)() as db:
            for cid in leaves:
                conversation = await db.get_one(Conversation, cid)
                rows, _ = await messages.visible_messages(db, conversation, None, 50)
                shown[cid] = [row.content or f"{row.conversation_id}:{row.message_id}" for row in rows]
        return parents, leaves, shown
    finally:
        await engine.dispose()


def test_existing_conversations_become_single_path_trees(unmigrated_url: str) -> None:
    config = alembic_config(unmigrated_url)
    before = ScriptDirectory.from_config(config).get_revision(TREE_REVISION).down_revision
    assert isinstance(before, str)
    command.upgrade(config, before)
    asyncio.run(_seed_old(unmigrated_url))
    command.upgrade(config, "head")
    parents, leaves, shown = asyncio.run(_read(unmigrated_url))
    assert parents == {10: None, 11: 10, 12: 11, 13: 12, 20: 11, 21: 20}
    assert leaves == {1: 13, 2: 21, 3: 21, 4: 10, 5: None}
    assert shown == {
        1: ["1:1", "1:2", "1:3", "1:4"],
        2: ["1:1", "1:2", "2:3", "2:4"],
        3: ["1:1", "1:2", "2:3", "2:4"],
        4: ["1:1"],
        5: [],
    }
    # And back: the downgrade removes the tree, the upgrade builds it again the same way.
    command.downgrade(config, before)
    command.upgrade(config, "head")
    assert asyncio.run(_read(unmigrated_url))[0] == parents
