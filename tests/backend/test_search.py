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

from backend.db import alembic_config
from tests.support import databases
from tests.support.api import signed_in
from tests.support.scripted_provider import ScriptedProvider, text
from tests.support.search import api_search, chat, hit_ids, old_user_finds, seed_old_conversation


async def test_messages_and_replies_are_found_by_substring_with_a_highlighted_snippet(
    chat_server: str, scripted_provider: ScriptedProvider
) -> None:
    scripted_provider.script(
        text("下周我们在北京开会，讨论明年的预算和招聘计划。"), text("The Quarterly Budget is due Friday.")
    )
    async with signed_in(chat_server, "finder") as client:
        cid = await chat(client, "Plans", "会议安排在哪里？", "When is the budget due?")
        chinese = await api_search(client, "北京开会")
        two_chars = await api_search(client, "预算")
        english = await api_search(client, "quarterly budget")
        question = await api_search(client, "BUDGET")
        nothing = await api_search(client, "上海")
    assert hit_ids(chinese) == [(cid, 2)]
    hit = chinese.json()["items"][0]
    assert hit["role"] == "assistant" and hit["conversation_title"] == "Plans"
    assert hit["snippet"] == {
        "before": "下周我们在",
        "match": "北京开会",
        "after": "，讨论明年的预算和招聘计划。",
    }
    assert hit_ids(two_chars) == [(cid, 2)]
    assert hit_ids(english) == [(cid, 4)]
    assert english.json()["items"][0]["snippet"]["match"] == "Quarterly Budget"
    # Newest first: the reply, then the question that asked for it.
    assert hit_ids(question) == [(cid, 4), (cid, 3)]
    assert hit_ids(nothing) == []


async def test_wildcards_and_operators_are_text_and_bad_queries_are_refused(
    chatter: httpx.AsyncClient,
) -> None:
    cid = await chat(
        chatter,
        "Odd text",
        "we grew 50% this year",
        "we grew 500 units",
        'file a_b.txt says "NEAR(x y)" OR *',
        "file axb.txt",
    )
    percent = await api_search(chatter, "50%")
    underscore = await api_search(chatter, "a_b")
    operators = await api_search(chatter, '"NEAR(x y)" OR *')
    quote = await api_search(chatter, '"')
    empty = await api_search(chatter, "   ")
    huge = await api_search(chatter, "x" * 10_000)
    # The scripted provider echoes each message: the reply holds the same text.
    assert {m for _, m in hit_ids(percent)} == {1, 2}
    assert {m for _, m in hit_ids(underscore)} == {5, 6}
    assert {m for _, m in hit_ids(operators)} == {5, 6}
    assert {m for _, m in hit_ids(quote)} == {5, 6}
    assert all(c == cid for c, _ in hit_ids(percent))
    assert empty.status_code == 422 and empty.json()["code"] == "empty_query"
    assert huge.status_code == 422 and huge.json()["code"] == "query_too_long"


async def test_another_users_and_deleted_conversations_messages_are_never_found(chat_server: str) -> None:
    async with signed_in(chat_server, "alice") as alice, signed_in(chat_server, "bob") as bob:
        await chat(alice, "Alice's", "the secret word is pelican")
        gone = await chat(alice, "Gone", "pelican feathers everywhere")
        await alice.delete(f"/api/conversations/{gone}")
        theirs = await api_search(bob, "pelican")
        mine = await api_search(alice, "pelican")
        short = await api_search(bob, "pe")
    assert hit_ids(theirs) == [] and hit_ids(short) == []
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
        asked = await api_search(client, "seabirds")
        turn_id = sent.json()["turn_id"]
        for _ in range(200):
            if (await client.get(f"/api/conversations/{cid}")).json()["running_turn_id"] != turn_id:
                break
            await asyncio.sleep(0.05)
        answered = await api_search(client, "over the sea")
    assert hit_ids(asked) == [(cid, 1)]  # on send
    assert hit_ids(answered) == [(cid, 2)]  # at the turn's end


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
        asyncio.run(seed_old_conversation(url, "旧的会议记录", "Minutes of the old meeting"))
        command.upgrade(alembic_config(url), "head")
        assert asyncio.run(old_user_finds(url, "会议记")) == [1]
        assert asyncio.run(old_user_finds(url, "OLD MEETING")) == [2]
        command.downgrade(alembic_config(url), "0009")
        command.upgrade(alembic_config(url), "head")
        assert asyncio.run(old_user_finds(url, "会议")) == [1]
    finally:
        if backend == "postgres":
            asyncio.run(databases.drop_postgres_database(url))
