"""Delivery when Redis misbehaves, in one process or two sharing a database: a Redis that
accepts connections and never answers stalls neither the event writer nor other turns, and a
stop is stored before it is acknowledged (refused only when it can be neither stored nor
broadcast)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx

from backend.app import create_app
from backend.settings import Settings
from tests.support.api import new_user
from tests.support.scripted_provider import ScriptedProvider
from tests.support.scripted_provider import text as reply
from tests.support.servers import serve, silent_tcp_server
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
