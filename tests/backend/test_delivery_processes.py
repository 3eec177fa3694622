"""Delivery across real process boundaries: a crash mid-turn, and several replicas with Redis."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.support.api import new_user, signed_in, signed_in_on_both, started_turn, wait_status
from tests.support.processes import ROOT, BackendProcess, MakeFleet, backend_env
from tests.support.scripted_provider import ScriptedProvider, text
from tests.support.servers import PrivateRedis, free_port
from tests.support.sse import Received, gapless, read_stream

LONG = " ".join(f"token{n}" for n in range(400))
FALLBACK_POLL_SECONDS = 30


async def test_a_crash_mid_turn_leaves_an_interrupted_message_with_its_partial_text(
    sqlite_url: str, tmp_path: Path, scripted_provider: ScriptedProvider
) -> None:
    env = backend_env(sqlite_url, tmp_path / "data", scripted_provider.base_url)
    first = await asyncio.to_thread(BackendProcess(env, tmp_path / "first.log").start)
    client = await new_user(first.base_url, "survivor")
    try:
        scripted_provider.script(text(LONG, token_delay=0.03))
        cid = (await client.post("/api/conversations", json={"title": "crash"})).json()["id"]
        await client.post(f"/api/conversations/{cid}/messages", json={"content": "a long answer please"})
        seen = await read_stream(client, cid, stop_after=20)
        first.kill()

        second = await asyncio.to_thread(BackendProcess(env, tmp_path / "second.log").start)
        client.base_url = httpx.URL(second.base_url)
        try:
            messages = (await client.get(f"/api/conversations/{cid}/messages")).json()["items"]
            user, assistant = messages
            assert user["content"] == "a long answer please" and user["status"] == "completed"
            assert assistant["status"] == "interrupted"
            partial = assistant["result"]["value"]
            assert partial.startswith(seen.text) and len(partial) < len(LONG)
            assert "restarted" in assistant["result"]["note"]
            # The stream of that turn now ends, replaying what was written and the note.
            replay = await read_stream(client, cid)
            assert replay.text == partial
            assert replay.terminal is not None and replay.terminal.data["code"] == "interrupted"
            # The conversation accepts new messages.
            scripted_provider.script(text("back again"))
            again = await client.post(
                f"/api/conversations/{cid}/messages", json={"content": "hello?"}, params={"wait": "true"}
            )
            assert again.json()["assistant_message"]["result"]["value"] == "back again"
        finally:
            second.stop()
    finally:
        first.stop()
        await client.aclose()


# A user's session, as a client of each replica.
OnBoth = tuple[httpx.AsyncClient, httpx.AsyncClient]


@pytest.fixture
async def on_both(make_fleet: MakeFleet) -> AsyncIterator[OnBoth]:
    """A new user's session, as a client of each of two replicas."""
    # The streams' fallback re-read of the log is made long: what arrives sooner came through Redis.
    fleet = make_fleet(CHAT_SHELL_STREAM_LOG_POLL_SECONDS=str(FALLBACK_POLL_SECONDS))
    a, b = await asyncio.gather(fleet.web("a"), fleet.web("b"))
    async with signed_in_on_both(a.base_url, b.base_url, "roamer") as clients:
        yield clients


async def _long_turn(client: httpx.AsyncClient, provider: ScriptedProvider, token_delay: float) -> int:
    """A new conversation whose turn streams `LONG`, started through `client`."""
    provider.script(text(LONG, token_delay=token_delay))
    return await started_turn(client, "go", title="replicas")


async def test_a_client_on_another_replica_follows_resumes_and_stops_the_turn(
    on_both: OnBoth, scripted_provider: ScriptedProvider
) -> None:
    on_a, on_b = on_both
    cid = await _long_turn(on_a, scripted_provider, 0.005)
    refused = await on_b.post(f"/api/conversations/{cid}/messages", json={"content": "again"})
    assert refused.status_code == 409
    head = await read_stream(on_b, cid, stop_after=15)
    tail = await read_stream(on_b, cid, last_event_id=head.events[-1].id)
    gapless(head, tail)
    stored = await wait_status(on_b, cid, {"completed"})
    assert head.text + tail.text == stored["result"]["value"] == LONG

    # A stop sent to replica B reaches the turn running on replica A.
    scripted_provider.script(text(LONG, token_delay=0.03))
    await on_a.post(f"/api/conversations/{cid}/messages", json={"content": "once more"})
    await read_stream(on_b, cid, stop_after=5)
    assert (await on_b.post(f"/api/conversations/{cid}/stop")).status_code == 202
    cancelled = await wait_status(on_a, cid, {"cancelled"}, within=15)
    assert 0 < len(cancelled["result"]["value"]) < len(LONG)


async def test_losing_redis_mid_turn_loses_nothing(
    on_both: OnBoth, scripted_provider: ScriptedProvider, private_redis: PrivateRedis
) -> None:
    on_a, on_b = on_both
    cid = await _long_turn(on_a, scripted_provider, 0.01)
    reading = asyncio.create_task(read_stream(on_b, cid))
    await asyncio.sleep(0.5)
    private_redis.kill()  # Redis goes away mid-turn
    read = await asyncio.wait_for(reading, 60)
    stored = await wait_status(on_a, cid, {"completed"})
    assert gapless(read).text == stored["result"]["value"] == LONG


async def _arrivals(client: httpx.AsyncClient, cid: int) -> dict[int, float]:
    """When each event of the conversation's stream arrived (loop time, by seq)."""
    loop = asyncio.get_running_loop()
    arrived: dict[int, float] = {}

    def stamp(events: list[Received]) -> bool:
        arrived.setdefault(events[-1].seq, loop.time())
        return False

    await read_stream(client, cid, until=stamp)
    return arrived


async def test_live_events_reach_another_replica_through_redis_without_delay(
    on_both: OnBoth, scripted_provider: ScriptedProvider
) -> None:
    """A client on replica B hears each event about when a client on replica A (which runs the
    turn) does; with the log's fallback re-read 30 s apart, only Redis can carry them that fast."""
    on_a, on_b = on_both
    scripted_provider.script(text(LONG, token_delay=0.01))
    cid = await started_turn(on_a, "go", title="fan-out")
    on_a_times, on_b_times = await asyncio.gather(_arrivals(on_a, cid), _arrivals(on_b, cid))
    assert on_a_times.keys() == on_b_times.keys()
    # Events already in the log when B subscribed arrive in its first read; the rest are live.
    added = sorted(on_b_times[seq] - on_a_times[seq] for seq in on_a_times if seq > 5)
    assert len(added) > 20
    assert added[len(added) // 2] < 0.25, added
    assert added[-1] < FALLBACK_POLL_SECONDS / 3, added


async def test_a_stop_sent_to_another_replica_without_redis_stops_the_turn(
    on_both: OnBoth, scripted_provider: ScriptedProvider, private_redis: PrivateRedis
) -> None:
    on_a, on_b = on_both
    private_redis.kill()
    cid = await _long_turn(on_a, scripted_provider, 0.03)
    await read_stream(on_a, cid, stop_after=5)
    asked = asyncio.get_running_loop().time()
    assert (await on_b.post(f"/api/conversations/{cid}/stop")).status_code == 202
    cancelled = await wait_status(on_a, cid, {"cancelled"}, within=15)
    assert asyncio.get_running_loop().time() - asked < 5
    assert 0 < len(cancelled["result"]["value"]) < len(LONG)


def test_several_workers_refuse_sqlite_with_the_fix(sqlite_url: str, tmp_path: Path) -> None:
    env = backend_env(
        sqlite_url, tmp_path / "data", "http://127.0.0.1:9/v1", CHAT_SHELL_REDIS_URL="redis://127.0.0.1:9/0"
    )
    done = subprocess.run(
        [sys.executable, "-m", "backend.cli", "serve", "--workers", "2", "--port", str(free_port())],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "--workers needs PostgreSQL" in done.stderr
    assert "CHAT_SHELL_DATABASE_URL=postgresql" in done.stderr


@pytest.mark.deep
async def test_several_workers_on_postgres_and_redis_share_turns_and_stops(
    make_fleet: MakeFleet, scripted_provider: ScriptedProvider
) -> None:
    server = await make_fleet().web("workers", "--workers", "2")
    async with signed_in(server.base_url, "crowd") as client:
        cid = await _long_turn(client, scripted_provider, 0.03)
        head = await read_stream(client, cid, stop_after=5)
        assert [e.seq for e in head.events] == [1, 2, 3, 4, 5]
        assert (await client.post(f"/api/conversations/{cid}/stop")).status_code == 202
        cancelled = await wait_status(client, cid, {"cancelled"}, within=15)
        assert cancelled["result"]["value"].startswith(head.text)
