"""Delivery when Redis misbehaves, in one process or two sharing a database: a Redis that
accepts connections and never answers stalls neither the event writer nor other turns, and a
stop is stored before it is acknowledged (refused only when it can be neither stored nor
broadcast). A turn's stream on Redis always expires."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import redis.asyncio as aioredis

from backend.app import create_app
from backend.services.delivery.broker import RedisBroker
from backend.services.delivery.event_log import StoredEvent
from backend.settings import Settings
from tests.support.api import new_user
from tests.support.scripted_provider import ScriptedProvider
from tests.support.scripted_provider import text as reply
from tests.support.servers import PrivateRedis, serve, silent_tcp_server
from tests.support.sse import read_stream

ANSWER = " ".join(f"piece{n}" for n in range(150))
LONG = " ".join(f"word{n}" for n in range(600))


async def _status(client: httpx.AsyncClient, cid: int) -> dict:
    return (await client.get(f"/api/conversations/{cid}/messages")).json()["items"][-1]


async def _wait_status(client: httpx.AsyncClient, cid: int, wanted: str, within: float) -> dict:
    deadline = asyncio.get_running_loop().time() + within
    while (last := await _status(client, cid))["status"] != wanted:
        assert asyncio.get_running_loop().time() < deadline, f"still {last['status']}"
        await asyncio.sleep(0.05)
    return last


async def test_every_turn_stream_on_redis_carries_its_events_and_expires(private_redis: PrivateRedis) -> None:
    """An operator's Redis keeps no turn's stream forever: each batch sent refreshes the expiry
    of every turn it carries, whatever the number of its events."""

    async def runs_no_turn(turn_id: int) -> bool:
        return False

    async def decides_nothing(turn_id: int, call_id: str, allow: bool) -> bool | None:
        return None

    broker = RedisBroker(private_redis.url)
    await broker.start(runs_no_turn, decides_nothing)
    redis = aioredis.Redis.from_url(private_redis.url)
    try:
        events = [
            StoredEvent(turn, seq, "message.delta", {"text": f"{turn}.{seq}"})
            for seq in (1, 2, 3)
            for turn in (7, 8)
        ]
        await broker.publish(events)
        deadline = asyncio.get_running_loop().time() + 5
        keys = [RedisBroker.stream_key(turn) for turn in (7, 8)]
        while [await redis.xlen(key) for key in keys] != [3, 3]:
            assert asyncio.get_running_loop().time() < deadline, "the events never reached Redis"
            await asyncio.sleep(0.02)
        for key in keys:
            assert 0 < await redis.ttl(key) <= RedisBroker.STREAM_TTL_SECONDS
    finally:
        await redis.aclose()
        await broker.stop()


async def test_a_hanging_redis_stalls_no_turn_and_a_stop_still_stops(
    sqlite_url: str, chat_settings: Callable[..., Settings], scripted_provider: ScriptedProvider
) -> None:
    with silent_tcp_server() as address:
        settings = chat_settings(sqlite_url, redis_url=f"redis://{address}/0")
        async with serve(create_app(settings)) as base_url:
            client = await new_user(base_url, "patient")
            try:
                cids = []
                for n in range(3):
                    scripted_provider.script(reply(ANSWER, token_delay=0.005))
                    cids.append(
                        (await client.post("/api/conversations", json={"title": f"c{n}"})).json()["id"]
                    )
                    await client.post(f"/api/conversations/{cids[-1]}/messages", json={"content": "go"})
                reads = await asyncio.wait_for(asyncio.gather(*(read_stream(client, c) for c in cids)), 60)
                for cid, read in zip(cids, reads, strict=True):
                    assert read.text == ANSWER
                    # Each turn streams for under a second in ~20 ms frames. A writer that waited on
                    # Redis (seconds per commit) would deliver it in a few large pieces.
                    assert sum(e.event == "message.delta" for e in read.events) >= 20
                    assert [e.seq for e in read.events] == list(range(1, len(read.events) + 1))
                    assert (await _status(client, cid))["result"]["value"] == ANSWER

                scripted_provider.script(reply(LONG, token_delay=0.03))
                cid = (await client.post("/api/conversations", json={"title": "stop"})).json()["id"]
                await client.post(f"/api/conversations/{cid}/messages", json={"content": "go"})
                await read_stream(client, cid, stop_after=5)
                assert (await client.post(f"/api/conversations/{cid}/stop")).status_code == 202
                stopped = await _wait_status(client, cid, "cancelled", within=10)
                assert 0 < len(stopped["result"]["value"]) < len(LONG)
            finally:
                await client.aclose()
