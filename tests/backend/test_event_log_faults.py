"""A turn whose event log cannot be written never stays `running` (issue 17).

The database drops the connection of a commit in flight (`pg_terminate_backend`), or refuses
every write for a while (a trigger that rejects inserts into the log): the turn stops, ends
`failed` with the text its stream showed as soon as writes are accepted again, and the
conversation takes the next message. If writes stay refused past the retries, the next start
ends it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import asyncpg
import httpx
import pytest
from sqlalchemy import func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.app import create_app
from backend.models import Turn, TurnStatus
from backend.services.delivery import frame_store, turn_host
from backend.settings import Settings
from tests.conftest import _off_loop
from tests.support import databases
from tests.support.api import login, new_user
from tests.support.scripted_provider import ScriptedProvider
from tests.support.scripted_provider import text as reply
from tests.support.servers import serve
from tests.support.sse import StreamRead, gapless, read_stream

LONG = " ".join(f"word{n}" for n in range(400))

REFUSE = {
    "postgresql": [
        "CREATE FUNCTION refuse_turn_events() RETURNS trigger AS "
        "$$ BEGIN RAISE EXCEPTION 'the disk is full'; END $$ LANGUAGE plpgsql",
        "CREATE TRIGGER refuse_turn_events BEFORE INSERT ON turn_events "
        "FOR EACH ROW EXECUTE FUNCTION refuse_turn_events()",
    ],
    "sqlite": [
        "CREATE TRIGGER refuse_turn_events BEFORE INSERT ON turn_events "
        "BEGIN SELECT RAISE(ABORT, 'the disk is full'); END",
    ],
}
ACCEPT = {
    "postgresql": ["DROP TRIGGER refuse_turn_events ON turn_events", "DROP FUNCTION refuse_turn_events()"],
    "sqlite": ["DROP TRIGGER refuse_turn_events"],
}


@asynccontextmanager
async def _backend(settings: Settings, username: str) -> AsyncIterator[httpx.AsyncClient]:
    async with serve(create_app(settings)) as base_url:
        client = await new_user(base_url, username)
        try:
            yield client
        finally:
            await client.aclose()


async def _running_turns(engine: AsyncEngine) -> int:
    async with engine.connect() as connection:
        count = await connection.scalar(
            select(func.count()).select_from(Turn).where(Turn.status == TurnStatus.RUNNING)
        )
    return count or 0


async def _execute(engine: AsyncEngine, statements: list[str]) -> None:
    async with engine.begin() as connection:
        for statement in statements:
            await connection.execute(text(statement))


async def _start_long_turn(client: httpx.AsyncClient, provider: ScriptedProvider) -> tuple[int, StreamRead]:
    """A conversation whose reply is streaming, and its first events as a client read them."""
    provider.script(reply(LONG, token_delay=0.02))
    cid = (await client.post("/api/conversations", json={"title": "faults"})).json()["id"]
    await client.post(f"/api/conversations/{cid}/messages", json={"content": "a long answer"})
    return cid, await read_stream(client, cid, stop_after=10)


async def _ended_failed_with_what_was_shown(client: httpx.AsyncClient, cid: int, head: StreamRead) -> str:
    """The rest of the stream ends `failed`; the stored reply is exactly the text streamed."""
    tail = await asyncio.wait_for(read_stream(client, cid, last_event_id=head.events[-1].id), 30)
    gapless(head, tail)
    assert tail.terminal is not None and tail.terminal.event == "turn.failed", tail.events[-3:]
    assert tail.terminal.data["code"] == "event_log_failed"
    shown = head.text + tail.text
    assert tail.terminal.data["partial"] == shown and 0 < len(shown) < len(LONG)
    assistant = (await client.get(f"/api/conversations/{cid}/messages")).json()["items"][-1]
    assert assistant["status"] == "failed"
    assert assistant["result"]["value"] == shown
    return shown


async def _takes_the_next_message(client: httpx.AsyncClient, cid: int, provider: ScriptedProvider) -> None:
    provider.script(reply("back again"))
    again = await client.post(
        f"/api/conversations/{cid}/messages", json={"content": "still there?"}, params={"wait": "true"}
    )
    assert again.status_code == 200, again.text
    assert again.json()["assistant_message"]["result"]["value"] == "back again"


async def _blocked_log_insert(admin: asyncpg.Connection, within: float = 10) -> int:
    """The backend of the event writer's commit that waits on the test's table lock (only
    writes to the log conflict with it; reads go on)."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        pid = await admin.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND wait_event_type = 'Lock' LIMIT 1"
        )
        if pid is not None:
            return int(pid)
        assert asyncio.get_running_loop().time() < deadline, "no commit of the event log is waiting"
        await asyncio.sleep(0.02)


async def test_a_killed_database_connection_ends_the_turn_failed_with_its_partial_text(
    postgres_url: str, chat_settings: Callable[..., Settings], scripted_provider: ScriptedProvider
) -> None:
    _off_loop(lambda: databases.truncate_all(postgres_url))
    admin = await asyncpg.connect(databases.asyncpg_dsn(postgres_url))
    try:
        async with (
            databases.engine_for(postgres_url) as engine,
            _backend(chat_settings(postgres_url), "cutoff") as client,
        ):
            cid, head = await _start_long_turn(client, scripted_provider)
            # The next commit of the log waits on a lock; its connection is killed mid-write.
            async with admin.transaction():
                await admin.execute("LOCK TABLE turn_events IN EXCLUSIVE MODE")
                pid = await _blocked_log_insert(admin)
                assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
            await _ended_failed_with_what_was_shown(client, cid, head)
            await _takes_the_next_message(client, cid, scripted_provider)
            assert await _running_turns(engine) == 0
    finally:
        await admin.close()


async def test_writes_refused_for_a_while_end_the_turn_once_they_are_accepted(
    database_url: str, chat_settings: Callable[..., Settings], scripted_provider: ScriptedProvider
) -> None:
    dialect = make_url(database_url).get_backend_name()
    async with (
        databases.engine_for(database_url) as engine,
        _backend(chat_settings(database_url), "refused") as client,
    ):
        cid, head = await _start_long_turn(client, scripted_provider)
        await _execute(engine, REFUSE[dialect])
        await asyncio.sleep(1.0)
        assert (await client.get(f"/api/conversations/{cid}/messages")).json()["items"][-1][
            "status"
        ] == "running"
        await _execute(engine, ACCEPT[dialect])
        await _ended_failed_with_what_was_shown(client, cid, head)
        await _takes_the_next_message(client, cid, scripted_provider)
        assert await _running_turns(engine) == 0


async def test_writes_refused_past_the_retries_are_ended_by_the_next_start(
    sqlite_url: str,
    chat_settings: Callable[..., Settings],
    scripted_provider: ScriptedProvider,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(turn_host, "END_ATTEMPTS", 2)
    settings = chat_settings(sqlite_url)
    async with databases.engine_for(sqlite_url) as engine:
        async with _backend(settings, "outlasted") as client:
            cid, head = await _start_long_turn(client, scripted_provider)
            await _execute(engine, REFUSE["sqlite"])
            await asyncio.sleep(2.0)  # both attempts to store the ending are refused
            await _execute(engine, ACCEPT["sqlite"])
            assert await _running_turns(engine) == 1
        async with serve(create_app(settings)) as base_url:
            again = await login(base_url, "outlasted")
            try:
                assistant = (await again.get(f"/api/conversations/{cid}/messages")).json()["items"][-1]
                assert assistant["status"] == "interrupted"
                assert assistant["result"]["value"].startswith(head.text)
                await _takes_the_next_message(again, cid, scripted_provider)
                assert await _running_turns(engine) == 0
            finally:
                await again.aclose()


async def test_connections_dropped_while_the_backend_was_idle_do_not_fail_the_next_turn(
    postgres_url: str,
    chat_settings: Callable[..., Settings],
    scripted_provider: ScriptedProvider,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The event writer holds a connection between commits; one the server dropped while the
    writer had nothing to write (a restart, an idle timeout) is not used for the next turn."""
    monkeypatch.setattr(frame_store, "HELD_IDLE_SECONDS", 0.2)
    _off_loop(lambda: databases.truncate_all(postgres_url))
    admin = await asyncpg.connect(databases.asyncpg_dsn(postgres_url))
    try:
        async with _backend(chat_settings(postgres_url), "idle") as client:
            cid = (await client.post("/api/conversations", json={"title": "idle"})).json()["id"]
            await _takes_the_next_message(client, cid, scripted_provider)
            dropped = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            assert dropped >= 1
            await asyncio.sleep(0.3)
            await _takes_the_next_message(client, cid, scripted_provider)
    finally:
        await admin.close()
