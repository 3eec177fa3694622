"""Full-text search over the text of a user's own messages, on SQLite (FTS5 trigram) and
PostgreSQL (pg_trgm): substrings in Chinese and English, highlighted snippets, kept current on
send, turn end and delete, filled for messages stored before the migration, and the bad input
of the issue (empty, 10,000 characters, wildcards and operators, other users' messages)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from alembic import command
from sqlalchemy import bindparam, select
from sqlalchemy import text as sql

from backend.db import alembic_config, create_engine, session_factory
from backend.models import User
from backend.models.base import JsonDoc
from backend.services import search as message_search
from tests.support import databases
from tests.support.api import signed_in
from tests.support.scripted_provider import ScriptedProvider, text


async def _chat(client: httpx.AsyncClient, title: str, *turns: str) -> int:
    cid = (await client.post("/api/conversations", json={"title": title})).json()["id"]
    for content in turns:
        response = await client.post(
            f"/api/conversations/{cid}/messages", params={"wait": "true"}, json={"content": content}
        )
        assert response.status_code == 200, response.text
    return cid


async def _search(client: httpx.AsyncClient, query: str) -> httpx.Response:
    return await client.get("/api/search", params={"q": query})


def _found(response: httpx.Response) -> list[tuple[int, int]]:
    assert response.status_code == 200, response.text
    return [(hit["conversation_id"], hit["message_id"]) for hit in response.json()["items"]]


async def test_messages_and_replies_are_found_by_substring_with_a_highlighted_snippet(
    chat_server: str, scripted_provider: ScriptedProvider
) -> None:
    scripted_provider.script(
        text("下周我们在北京开会，讨论明年的预算和招聘计划。"), text("The Quarterly Budget is due Friday.")
    )
    async with signed_in(chat_server, "finder") as client:
        cid = await _chat(client, "Plans", "会议安排在哪里？", "When is the budget due?")
        chinese = await _search(client, "北京开会")
        two_chars = await _search(client, "预算")
        english = await _search(client, "quarterly budget")
        question = await _search(client, "BUDGET")
        nothing = await _search(client, "上海")
    assert _found(chinese) == [(cid, 2)]
    hit = chinese.json()["items"][0]
    assert hit["role"] == "assistant" and hit["conversation_title"] == "Plans"
    assert hit["snippet"] == {
        "before": "下周我们在",
        "match": "北京开会",
        "after": "，讨论明年的预算和招聘计划。",
    }
    assert _found(two_chars) == [(cid, 2)]
    assert _found(english) == [(cid, 4)]
    assert english.json()["items"][0]["snippet"]["match"] == "Quarterly Budget"
    # Newest first: the reply, then the question that asked for it.
    assert _found(question) == [(cid, 4), (cid, 3)]
    assert _found(nothing) == []


async def test_wildcards_and_operators_are_text_and_bad_queries_are_refused(
    chatter: httpx.AsyncClient,
) -> None:
    cid = await _chat(
        chatter,
        "Odd text",
        "we grew 50% this year",
        "we grew 500 units",
        'file a_b.txt says "NEAR(x y)" OR *',
        "file axb.txt",
    )
    percent = await _search(chatter, "50%")
    underscore = await _search(chatter, "a_b")
    operators = await _search(chatter, '"NEAR(x y)" OR *')
    quote = await _search(chatter, '"')
    empty = await _search(chatter, "   ")
    huge = await _search(chatter, "x" * 10_000)
    # The scripted provider echoes each message: the reply holds the same text.
    assert {m for _, m in _found(percent)} == {1, 2}
    assert {m for _, m in _found(underscore)} == {5, 6}
    assert {m for _, m in _found(operators)} == {5, 6}
    assert {m for _, m in _found(quote)} == {5, 6}
    assert all(c == cid for c, _ in _found(percent))
    assert empty.status_code == 422 and empty.json()["code"] == "empty_query"
    assert huge.status_code == 422 and huge.json()["code"] == "query_too_long"


async def test_another_users_and_deleted_conversations_messages_are_never_found(chat_server: str) -> None:
    async with signed_in(chat_server, "alice") as alice, signed_in(chat_server, "bob") as bob:
        await _chat(alice, "Alice's", "the secret word is pelican")
        gone = await _chat(alice, "Gone", "pelican feathers everywhere")
        await alice.delete(f"/api/conversations/{gone}")
        theirs = await _search(bob, "pelican")
        mine = await _search(alice, "pelican")
        short = await _search(bob, "pe")
    assert _found(theirs) == [] and _found(short) == []
    assert {hit["conversation_title"] for hit in mine.json()["items"]} == {"Alice's"}


async def test_the_index_follows_a_running_reply_to_its_end(
    chat_server: str, scripted_provider: ScriptedProvider
) -> None:
    scripted_provider.script(text("The albatross " + "glides far " * 30 + "over the sea", token_delay=0.01))
    async with signed_in(chat_server, "watcher") as client:
        cid = (await client.post("/api/conversations", json={"title": "Birds"})).json()["id"]
        sent = await client.post(
            f"/api/conversations/{cid}/messages", json={"content": "tell me of seabirds"}
        )
        asked = await _search(client, "seabirds")
        turn_id = sent.json()["turn_id"]
        for _ in range(200):
            if (await client.get(f"/api/conversations/{cid}")).json()["running_turn_id"] != turn_id:
                break
            await asyncio.sleep(0.05)
        answered = await _search(client, "over the sea")
    assert _found(asked) == [(cid, 1)]  # on send
    assert _found(answered) == [(cid, 2)]  # at the turn's end


async def _seed_before_search(url: str) -> None:
    async with databases.plain_sql(url) as connection:
        await databases.insert_first_user(connection, "early")
        await connection.execute(
            sql(
                "INSERT INTO conversations (id, owner_id, title, created_at, updated_at, "
                "next_message_id) VALUES (1, 1, 'Old', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, 3)"
            )
        )
        for number, role, content, result in (
            (1, "user", "旧的会议记录", None),
            (2, "assistant", "", {"value": "Minutes of the old meeting"}),
        ):
            await connection.execute(
                sql(
                    "INSERT INTO messages (conversation_id, message_id, role, status, content, result, "
                    "has_checkpoint, created_at, updated_at) VALUES (1, :n, :role, 'completed', "
                    ":content, :result, false, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                ).bindparams(bindparam("result", type_=JsonDoc)),
                {"n": number, "role": role, "content": content, "result": result},
            )


async def _search_as(url: str, username: str, query: str) -> list[int]:
    engine = create_engine(url)
    try:
        async with session_factory(engine)() as db:
            user = await db.scalar(select(User).where(User.username == username))
            assert user is not None
            return [hit.message_id for hit in await message_search.search(db, user, query, 10)]
    finally:
        await engine.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_messages_stored_before_the_migration_are_found_after_it(backend: str, tmp_path: Path) -> None:
    if backend == "postgres":
        if not asyncio.run(databases.postgres_available()):
            pytest.skip("PostgreSQL is not reachable")
        url = asyncio.run(databases.create_postgres_database())
    else:
        url = f"sqlite+aiosqlite:///{tmp_path / 'old.db'}"
    try:
        command.upgrade(alembic_config(url), "0009")
        asyncio.run(_seed_before_search(url))
        command.upgrade(alembic_config(url), "head")
        assert asyncio.run(_search_as(url, "early", "会议记")) == [1]
        assert asyncio.run(_search_as(url, "early", "OLD MEETING")) == [2]
        command.downgrade(alembic_config(url), "0009")
        command.upgrade(alembic_config(url), "head")
        assert asyncio.run(_search_as(url, "early", "会议")) == [1]
    finally:
        if backend == "postgres":
            asyncio.run(databases.drop_postgres_database(url))
