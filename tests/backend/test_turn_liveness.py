"""A replica marks its running turns alive every few seconds (`turns.heartbeat_at`), so another
replica can tell a crashed one's turns from live ones. The beat never waits on a turn row that
another transaction holds: the commit that stores several turns' ends locks their rows in its
own order, and a beat waiting on one of them while holding others deadlocked with it (a load of
200 concurrent turns on PostgreSQL lost whole batches of turns to `deadlock detected`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import asyncpg

from backend.app import create_app
from backend.settings import Settings
from tests.conftest import _off_loop
from tests.support import databases
from tests.support.api import new_user
from tests.support.scripted_provider import ScriptedProvider, text
from tests.support.servers import serve

LONG = " ".join(f"word{n}" for n in range(400))
RUNNING = "SELECT id FROM turns WHERE status = 'running' ORDER BY id"


async def test_the_beat_skips_a_turn_row_another_transaction_holds_and_marks_the_others(
    postgres_url: str, chat_settings: Callable[..., Settings], scripted_provider: ScriptedProvider
) -> None:
    _off_loop(lambda: databases.truncate_all(postgres_url))
    app = create_app(chat_settings(postgres_url))
    admin = await asyncpg.connect(databases.asyncpg_dsn(postgres_url))
    try:
        async with serve(app) as base_url:
            client = await new_user(base_url, "beating")
            for title in ("held", "free"):
                scripted_provider.script(text(LONG, token_delay=0.05))
                cid = (await client.post("/api/conversations", json={"title": title})).json()["id"]
                await client.post(f"/api/conversations/{cid}/messages", json={"content": "a long answer"})
            runner = app.state.ctx.runner
            for _ in range(500):
                running = [row["id"] for row in await admin.fetch(RUNNING)]
                if len(running) == 2:
                    break
                await asyncio.sleep(0.01)
            held, free = running
            before = dict(await admin.fetch("SELECT id, heartbeat_at FROM turns"))
            async with admin.transaction():
                await admin.execute("SELECT 1 FROM turns WHERE id = $1 FOR UPDATE", held)
                # Waiting on the held row would never end while this transaction is open. The
                # other row can be held for a moment too (a commit of its events): beat again.
                for _ in range(50):
                    await asyncio.wait_for(runner.liveness.beat(), 5)
                    after = dict(await admin.fetch("SELECT id, heartbeat_at FROM turns"))
                    if after[free] > before[free]:
                        break
                    await asyncio.sleep(0.02)
            assert after[free] > before[free]
            assert after[held] == before[held]
            await client.post(f"/api/conversations/{cid}/stop")
            await client.aclose()
    finally:
        await admin.close()
