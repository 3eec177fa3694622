"""SQLite's write lock held past the busy timeout: a send fails clearly and stores nothing;
a running turn's events wait and are written, none lost."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy.engine import make_url

from backend.app import create_app
from backend.settings import Settings
from tests.support.api import new_user, started_turn
from tests.support.scripted_provider import ScriptedProvider, text
from tests.support.servers import serve
from tests.support.sse import read_stream


@pytest.fixture
async def impatient_server(sqlite_url: str, chat_settings: Callable[..., Settings]) -> AsyncIterator[str]:
    """The backend on SQLite with a 0.2 s busy timeout, so a held lock outlasts it at once."""
    settings = chat_settings(sqlite_url, sqlite_busy_timeout_seconds=0.2)
    async with serve(create_app(settings)) as base_url:
        yield base_url


@contextmanager
def write_lock_held(database_url: str) -> Iterator[None]:
    """Another process holds the write lock (a long migration, a backup, another replica)."""
    holder = sqlite3.connect(make_url(database_url).database, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


async def test_a_locked_database_answers_503_and_the_retry_succeeds(
    impatient_server: str, sqlite_url: str, scripted_provider: ScriptedProvider
) -> None:
    scripted_provider.script(text("hello back"))
    client = await new_user(impatient_server, "busy")
    try:
        cid = (await client.post("/api/conversations", json={"title": "t"})).json()["id"]
        with write_lock_held(sqlite_url):
            refused = await client.post(f"/api/conversations/{cid}/messages", json={"content": "hi"})
        assert refused.status_code == 503
        assert refused.json()["code"] == "database_busy"
        assert refused.headers["retry-after"] == "1"
        assert (await client.get(f"/api/conversations/{cid}/messages")).json()["items"] == []

        sent = await client.post(f"/api/conversations/{cid}/messages?wait=true", json={"content": "hi"})
        assert sent.status_code == 200
        messages = (await client.get(f"/api/conversations/{cid}/messages")).json()["items"]
        assert [m["role"] for m in messages] == ["user", "assistant"]
        assert {m["status"] for m in messages} == {"completed"}
        assert messages[0]["content"] == "hi" and messages[1]["result"]["value"] == "hello back"
    finally:
        await client.aclose()


async def test_a_turn_streaming_while_the_database_is_locked_loses_no_event(
    impatient_server: str, sqlite_url: str, scripted_provider: ScriptedProvider
) -> None:
    reply = "one two three four five six seven eight nine ten eleven twelve"
    scripted_provider.script(text(reply, token_delay=0.1))
    client = await new_user(impatient_server, "streamer")
    try:
        cid = await started_turn(client, "count", title="t")
        reading = asyncio.create_task(read_stream(client, cid))
        await asyncio.sleep(0.3)
        # Longer than the busy timeout, in the middle of the turn: the event log's group
        # commits find the database locked and must write their events afterwards.
        with write_lock_held(sqlite_url):
            await asyncio.sleep(1.0)
        streamed = await asyncio.wait_for(reading, 30)
        assert streamed.terminal is not None and streamed.terminal.event == "turn.completed"
        assert streamed.text == reply
        seqs = [int(e.id.split(":")[1]) for e in streamed.events]
        assert seqs == list(range(1, len(seqs) + 1))
        replay = await read_stream(client, cid, after=0)
        assert replay.text == reply
    finally:
        await client.aclose()
