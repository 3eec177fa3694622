"""Search for one- and two-character CJK words (issue 35), on SQLite and PostgreSQL: most Chinese
words have two characters and both trigram indexes need three. Such a word finds exactly its
messages, newest first, with its snippet, in the asker's live conversations only, as a longer
query does; it is looked up in the CJK index (migration 0022) instead of reading every message;
and the index follows a message whose text changes, or that goes."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from typing import Any

import httpx
from alembic import command
from sqlalchemy import event, insert, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db import alembic_config, create_engine, session_factory
from backend.models import Conversation, Message, User
from backend.services import search as message_search
from tests.support import databases
from tests.support.api import signed_in
from tests.support.conversation import chinese_text
from tests.support.scripted_provider import ScriptedProvider
from tests.support.scripted_provider import text as reply
from tests.support.search import api_search, chat, hit_ids, old_user_finds, seed_old_conversation

# The filler of chinese_text has none of these characters.
RARE, ABSENT = "上海", "台风"


async def test_one_and_two_character_words_find_exactly_their_messages_newest_first(
    chat_server: str,
) -> None:
    # The scripted provider echoes each message ("Echo: ..."): the reply holds the same text.
    async with signed_in(chat_server, "traveller") as me, signed_in(chat_server, "stranger") as other:
        trip = await chat(me, "Trip", "明天去上海出差", "上海 invoice attached")
        home = await chat(me, "Home", "北京下雨了", "海边的发票", "a股和B股")
        gone = await chat(me, "Gone", "上海的酒店")
        await me.delete(f"/api/conversations/{gone}")
        theirs = await chat(other, "Theirs", "上海见")
        word = await api_search(me, RARE)
        newest_two = await api_search(me, RARE, limit=2)
        one_char = await api_search(me, "海")
        absent = await api_search(me, ABSENT)
        mixed = await api_search(me, f"{RARE} invoice")
        latin_and_cjk = await api_search(me, "A股")
        stranger = await api_search(other, RARE)
    assert hit_ids(word) == [(trip, 4), (trip, 3), (trip, 2), (trip, 1)]
    assert word.json()["items"][3]["snippet"] == {"before": "明天去", "match": "上海", "after": "出差"}
    assert word.json()["items"][2]["role"] == "assistant"
    assert hit_ids(newest_two) == [(trip, 4), (trip, 3)]
    assert hit_ids(one_char) == [(home, 4), (home, 3), (trip, 4), (trip, 3), (trip, 2), (trip, 1)]
    assert one_char.json()["items"][1]["snippet"] == {"before": "", "match": "海", "after": "边的发票"}
    assert hit_ids(absent) == []
    assert hit_ids(mixed) == [(trip, 4), (trip, 3)]
    assert hit_ids(latin_and_cjk) == [(home, 6), (home, 5)]
    assert latin_and_cjk.json()["items"][1]["snippet"]["match"] == "a股"
    assert hit_ids(stranger) == [(theirs, 2), (theirs, 1)]


def _starting_at_byte(start: int, word: str) -> str:
    """`word` at this byte (from 1) of the text's UTF-8, after text in one-, two-, three- and
    four-byte characters."""
    head, size = [], 0
    for char in itertools.cycle("aé中𠀀"):
        if size + len(char.encode()) >= start:
            break
        head.append(char)
        size += len(char.encode())
    return "".join(head) + "a" * (start - 1 - size) + word + "中" * 10


async def test_words_across_the_edges_of_what_sqlite_reads_at_a_time_are_found(
    chatter: httpx.AsyncClient,
) -> None:
    """SQLite reads a text in blocks of 16,384 bytes, each in pieces of 512 (migration 0022):
    a word whose first character straddles such an edge is found, at any point of the text."""
    cid = await chat(
        chatter,
        "Long",
        _starting_at_byte(16_383, RARE),  # 上 is bytes 16,383 to 16,385: the first block's edge
        _starting_at_byte(511, RARE),  # a piece's edge
        _starting_at_byte(16_384 + 2 * 512 - 1, "𠀀𠀁"),  # a four-byte character, in the second block
    )
    found = await api_search(chatter, RARE)
    astral = await api_search(chatter, "𠀀𠀁")
    assert hit_ids(found) == [(cid, 3), (cid, 1)]
    assert hit_ids(astral) == [(cid, 5)]
    assert found.json()["items"][1]["snippet"]["after"].startswith("中中中")


async def test_the_index_follows_a_reply_to_its_end_and_a_message_whose_text_changes(
    chat_server: str, database_url: str, scripted_provider: ScriptedProvider
) -> None:
    scripted_provider.script(reply("我们下周去" + "很远的地方，" * 30 + "上海", token_delay=0.01))
    async with signed_in(chat_server, "editor") as client:
        cid = (await client.post("/api/conversations", json={"title": "Plans"})).json()["id"]
        sent = await client.post(f"/api/conversations/{cid}/messages", json={"content": "去哪里出差"})
        asked = await api_search(client, "出差")
        running = await api_search(client, RARE)
        turn_id = sent.json()["turn_id"]
        for _ in range(200):
            if (await client.get(f"/api/conversations/{cid}")).json()["running_turn_id"] != turn_id:
                break
            await asyncio.sleep(0.05)
        answered = await api_search(client, RARE)
        async with databases.plain_sql(database_url) as connection:
            await _set_text(connection, cid, 1, "content", "去台风那里出差")
            await _set_text(connection, cid, 2, "result", {"value": "我们下周去北京"})
        question_edited = await api_search(client, ABSENT)
        reply_edited = await api_search(client, RARE)
        new_word = await api_search(client, "北京")
    assert hit_ids(asked) == [(cid, 1)]  # on send
    assert hit_ids(running) == []
    assert hit_ids(answered) == [(cid, 2)]  # at the turn's end
    assert hit_ids(question_edited) == [(cid, 1)]
    assert hit_ids(reply_edited) == []
    assert hit_ids(new_word) == [(cid, 2)]
    assert await _index_rows_of(database_url, RARE) == 0  # nothing of the old text stays


async def _index_rows_of(url: str, gram: str) -> int:
    """Rows of the CJK index with `gram`: a hit is always checked in the message's text, so a
    row left behind is never found, but would make the index grow."""
    async with databases.plain_sql(url) as connection:
        if connection.dialect.name == "sqlite":
            query = text("SELECT count(*) FROM message_search_cjk WHERE gram = :gram")
        else:
            query = text("SELECT count(*) FROM message_search_cjk WHERE grams @> ARRAY[CAST(:gram AS text)]")
        return int((await connection.execute(query, {"gram": gram})).scalar_one())


async def _set_text(connection: AsyncConnection, cid: int, number: int, column: str, value: object) -> None:
    """Rewrite a stored message's text in place, as a restarted reply does."""
    await connection.execute(
        text(f"UPDATE messages SET {column} = :value WHERE conversation_id = :cid AND message_id = :n"),
        {
            "value": json.dumps(value, ensure_ascii=False) if column == "result" else value,
            "cid": cid,
            "n": number,
        },
    )


async def test_a_message_that_goes_leaves_the_index(chat_server: str, database_url: str) -> None:
    """A conversation removed from the database takes its messages out of the index (on SQLite
    the next messages even reuse their ids): they are not found, and leave nothing behind."""
    async with signed_in(chat_server, "purged") as client:
        kept = await chat(client, "Kept", "今天在北京")
        purged = await chat(client, "Purged", "上海的会议")
        async with databases.plain_sql(database_url) as connection:
            await connection.execute(text("DELETE FROM conversations WHERE id = :id"), {"id": purged})
        later = await chat(client, "Later", "晚上吃饭")
        gone = await api_search(client, RARE)
        stays = await api_search(client, "北京")
        new = await api_search(client, "吃饭")
    assert hit_ids(gone) == []
    assert hit_ids(stays) == [(kept, 2), (kept, 1)]
    assert hit_ids(new) == [(later, 2), (later, 1)]
    assert await _index_rows_of(database_url, RARE) == 0


async def _cjk_objects(url: str) -> list[str]:
    """What migration 0022 creates, as far as it is there."""
    async with databases.plain_sql(url) as connection:
        if connection.dialect.name == "sqlite":
            query = "SELECT name FROM sqlite_master WHERE name LIKE 'message_search_cjk%' ORDER BY name"
        else:
            query = (
                "SELECT proname FROM pg_proc WHERE proname LIKE 'message_search_cjk%' "
                "UNION ALL SELECT relname FROM pg_class WHERE relname LIKE 'message_search_cjk%' "
                "UNION ALL SELECT tgname FROM pg_trigger WHERE tgname LIKE 'message_search_cjk%'"
            )
        return list((await connection.execute(text(query))).scalars())


def test_messages_stored_before_migration_0022_are_found_and_its_downgrade_removes_it(
    unmigrated_url: str,
) -> None:
    config = alembic_config(unmigrated_url)
    command.upgrade(config, "0021")
    asyncio.run(seed_old_conversation(unmigrated_url, "去上海的机票", "已经订好了上海的酒店"))
    command.upgrade(config, "head")
    assert asyncio.run(old_user_finds(unmigrated_url, RARE)) == [2, 1]
    assert asyncio.run(old_user_finds(unmigrated_url, "酒")) == [2]
    assert asyncio.run(_cjk_objects(unmigrated_url)) != []
    command.downgrade(config, "0021")
    assert asyncio.run(_cjk_objects(unmigrated_url)) == []
    assert asyncio.run(old_user_finds(unmigrated_url, "上海的")) == [2, 1]
    command.upgrade(config, "head")
    assert asyncio.run(old_user_finds(unmigrated_url, RARE)) == [2, 1]


# -- the CJK index is what answers ------------------------------------------------------------

CONVERSATIONS, PER_CONVERSATION = 40, 50
# On SQLite the walk starts at the query's gram in the CJK table, newest first; every other
# table is then read by primary key (the FTS table by rowid, "INDEX 0:="), and nothing sorted.
SQLITE_LOOKUP = "SEARCH message_search_cjk USING PRIMARY KEY (gram=?)"


async def _seed_many(url: str) -> None:
    """One user's 2,000 messages of Chinese text in 40 conversations, two with the rare word."""
    engine = create_engine(url)
    try:
        async with session_factory(engine)() as db, db.begin():
            user = User(username="reader", password_hash="x")
            db.add(user)
            await db.flush()
            conversations = [
                Conversation(owner_id=user.id, title=f"c{n}", next_message_id=PER_CONVERSATION + 1)
                for n in range(CONVERSATIONS)
            ]
            db.add_all(conversations)
            await db.flush()
            rows = []
            for index in range(CONVERSATIONS * PER_CONVERSATION):
                body = chinese_text(60, index) + (RARE if index in (7, 1234) else "")
                number = index % PER_CONVERSATION + 1
                assistant = number % 2 == 0
                rows.append(
                    {
                        "conversation_id": conversations[index // PER_CONVERSATION].id,
                        "message_id": number,
                        "role": "assistant" if assistant else "user",
                        "content": "" if assistant else body,
                        "result": {"value": body} if assistant else None,
                    }
                )
            await db.execute(insert(Message), rows)
        async with engine.begin() as connection:
            await connection.execute(text("ANALYZE"))
    finally:
        await engine.dispose()


async def _explained(url: str, query: str) -> tuple[int, list[Any]]:
    """The hits the service finds for `query`, and the plans of the statements it ran for them
    (SQLite: the EXPLAIN QUERY PLAN lines; PostgreSQL: EXPLAIN ANALYZE, as JSON)."""
    engine = create_engine(url)
    ran: list[tuple[str, Any]] = []
    event.listen(engine.sync_engine, "before_cursor_execute", lambda *args: ran.append((args[2], args[3])))
    try:
        async with session_factory(engine)() as db:
            user = await db.scalar(select(User).where(User.username == "reader"))
            assert user is not None
            hits = await message_search.search(db, user, query, 20)
            searches = [(sql, parameters) for sql, parameters in ran if " JOIN conversations " in sql]
            connection = await db.connection()
            plans = []
            for sql, parameters in searches:
                if engine.dialect.name == "sqlite":
                    lines = await connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", parameters)
                    plans.append([line[-1] for line in lines.all()])
                else:
                    explained = await connection.exec_driver_sql(
                        f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", parameters
                    )
                    plans.append(explained.scalar_one()[0]["Plan"])
    finally:
        await engine.dispose()
    return len(hits), plans


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _messages_read(plan: dict[str, Any]) -> int:
    """Rows of `messages` a PostgreSQL plan read: returned or thrown away, in every loop."""
    return sum(
        (
            node["Actual Rows"]
            + node.get("Rows Removed by Filter", 0)
            + node.get("Rows Removed by Index Recheck", 0)
        )
        * node["Actual Loops"]
        for node in _nodes(plan)
        if node.get("Relation Name") == "messages"
    )


async def test_a_short_cjk_query_is_an_index_lookup_not_a_read_of_every_message(database_url: str) -> None:
    await _seed_many(database_url)
    stored = CONVERSATIONS * PER_CONVERSATION
    recent = message_search.RECENT_CONVERSATIONS * PER_CONVERSATION
    for query, hits in ((RARE, 2), (ABSENT, 0), ("上", 2)):
        found, plans = await _explained(database_url, query)
        assert found == hits, query
        if database_url.startswith("sqlite"):
            [plan] = plans
            assert plan[0] == SQLITE_LOOKUP, plan
            scans = [line for line in plan if line.startswith("SCAN ") and not line.endswith("INDEX 0:=")]
            assert scans == [] and not any("TEMP B-TREE" in line for line in plan), plan
        else:
            # The user's 10 most recent conversations are read first, as for any query; then
            # the CJK index names the messages to read, out of 2,000.
            latest, everywhere = (_messages_read(plan) for plan in plans)
            assert latest <= recent and everywhere <= hits, (query, latest, everywhere)
    # A short query without CJK characters has no index to ask: it reads every message.
    found, plans = await _explained(database_url, "qz")
    assert found == 0
    if database_url.startswith("sqlite"):
        assert SQLITE_LOOKUP not in plans[0] and "USE TEMP B-TREE FOR ORDER BY" in plans[0]
    else:
        assert _messages_read(plans[-1]) >= stored
