"""Turns on the job queue across real processes: web processes that only relay, worker
processes that run the turns, PostgreSQL and Redis. Each process is killed, stopped and
disconnected the way a crash, a deploy or a network fault would."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
import httpx
import pytest

from tests.support.api import signed_in, signed_in_on_both, started_turn, wait_status
from tests.support.mcp_servers import stdio_server
from tests.support.processes import BackendProcess, Fleet, MakeFleet
from tests.support.scripted_provider import ScriptedProvider, text, tool_call
from tests.support.servers import PrivateRedis
from tests.support.sse import StreamRead, gapless, read_stream

LONG = " ".join(f"token{n}" for n in range(300))
RESTART_AFTER = 3.0
# The bound: a lost worker's turn restarts within 15 s.
RESTART_BOUND = 15.0


@pytest.fixture
def fleet(make_fleet: MakeFleet) -> Fleet:
    return make_fleet(
        CHAT_SHELL_WORKER_RESTART_AFTER_SECONDS=str(RESTART_AFTER),
        # Web processes only relay; workers run the turns.
        CHAT_SHELL_WORKER_IN_PROCESS="false",
    )


def _turn_of(read: StreamRead) -> int:
    """The turn a stream's events belong to (their ids are `turn:seq`)."""
    return int(read.events[0].id.split(":")[0])


@asynccontextmanager
async def _on_two_webs(
    fleet: Fleet, username: str, *worker_args: str, **extra: str
) -> AsyncIterator[tuple[BackendProcess, httpx.AsyncClient, httpx.AsyncClient]]:
    """A new user's session on web processes `a` and `b`, whose turns one worker `w` runs:
    `a` and the session's client of each."""
    a, b = await asyncio.gather(fleet.web("a", **extra), fleet.web("b", **extra))
    await fleet.worker("w", *worker_args, **extra)
    async with signed_in_on_both(a.base_url, b.base_url, username) as (on_a, on_b):
        yield a, on_a, on_b


@asynccontextmanager
async def _on_one_web(
    fleet: Fleet, username: str, *workers: str, **extra: str
) -> AsyncIterator[httpx.AsyncClient]:
    """A new user's client of one web process, whose turns the workers named run."""
    web = await fleet.web("web")
    await fleet.workers(*workers, **extra)
    async with signed_in(web.base_url, username) as client:
        yield client


async def _long_turn(client: httpx.AsyncClient, provider: ScriptedProvider, *delays: float) -> int:
    """A new conversation whose turn streams `LONG` (each attempt at its own token delay)."""
    provider.script(*(text(LONG, token_delay=delay) for delay in delays))
    return await started_turn(client, "go")


async def _messages(client: httpx.AsyncClient, cid: int) -> list[dict]:
    return (await client.get(f"/api/conversations/{cid}/messages")).json()["items"]


async def test_a_web_process_killed_mid_reply_resumes_exactly_on_another(
    fleet: Fleet, scripted_provider: ScriptedProvider
) -> None:
    async with _on_two_webs(fleet, "roamer") as (a, on_a, on_b):
        cid = await _long_turn(on_a, scripted_provider, 0.01)
        head = await read_stream(on_a, cid, stop_after=20)
        a.kill()
        tail = await read_stream(on_b, cid, last_event_id=head.events[-1].id)
        assert not any(e.event == "turn.restarted" for e in gapless(head, tail).events)
        stored = await wait_status(on_b, cid, {"completed"})
        assert head.text + tail.text == stored["result"]["value"] == LONG
        assert len(scripted_provider.chat_requests) == 1  # the turn ran once, in its worker


async def test_a_worker_killed_mid_reply_restarts_on_another_and_replaces_the_partial_text(
    fleet: Fleet, scripted_provider: ScriptedProvider
) -> None:
    async with _on_one_web(fleet, "survivor", "w1", "w2") as client:
        scripted_provider.script(text(LONG, token_delay=0.05), text(LONG, token_delay=0.002))
        cid = await started_turn(client, "a long answer please")
        head = await read_stream(client, cid, stop_after=15)
        loop = asyncio.get_running_loop()
        fleet.running(_turn_of(head)).kill()
        killed = loop.time()
        restarted_at: list[float] = []

        def stamp(events: list) -> bool:
            if events[-1].event == "turn.restarted":
                restarted_at.append(loop.time())
            return False

        tail = await read_stream(client, cid, last_event_id=head.events[-1].id, until=stamp)
        assert restarted_at and restarted_at[0] - killed < RESTART_BOUND
        read = gapless(head, tail)
        restart = next(e for e in tail.events if e.event == "turn.restarted")
        assert restart.data["code"] == "worker_lost" and "restarted" in restart.data["message"]
        stored = await wait_status(client, cid, {"completed"})
        # The partial text of the lost attempt is gone: the page and the store hold the new reply.
        assert read.shown == stored["result"]["value"] == LONG
        user, assistant = await _messages(client, cid)
        assert user["content"] == "a long answer please" and assistant["status"] == "completed"


@pytest.mark.deep
async def test_a_turn_whose_worker_dies_on_both_attempts_ends_failed(
    fleet: Fleet, scripted_provider: ScriptedProvider
) -> None:
    async with _on_one_web(fleet, "unlucky", "w1", "w2", "w3") as client:
        cid = await _long_turn(client, scripted_provider, 0.05, 0.05)
        head = await read_stream(client, cid, stop_after=5)
        fleet.running(_turn_of(head)).kill()
        again = await read_stream(
            client, cid, last_event_id=head.events[-1].id, until=lambda e: e[-1].event == "turn.restarted"
        )
        assert again.events[-1].event == "turn.restarted"
        await read_stream(client, cid, last_event_id=again.events[-1].id, stop_after=3)
        fleet.running(_turn_of(head)).kill()
        stored = await wait_status(client, cid, {"failed"}, within=RESTART_BOUND + 10)
        assert stored["result"]["error"]["code"] == "worker_lost"
        end = await read_stream(client, cid)
        assert end.terminal is not None and end.terminal.data["code"] == "worker_lost"
        assert end.shown == stored["result"]["value"]
        # Nothing stays running: the conversation takes the next message at once.
        scripted_provider.script(text("fine now"))
        sent = await client.post(f"/api/conversations/{cid}/messages", json={"content": "again"})
        assert sent.status_code == 202
        assert (await wait_status(client, cid, {"completed"}))["result"]["value"] == "fine now"


async def test_sigterm_on_a_worker_finishes_its_turn_before_it_exits(
    fleet: Fleet, scripted_provider: ScriptedProvider
) -> None:
    web = await fleet.web("web")
    worker = await fleet.worker("w", CHAT_SHELL_WORKER_DRAIN_SECONDS="60")
    async with signed_in(web.base_url, "deployer") as client:
        cid = await _long_turn(client, scripted_provider, 0.01)
        await read_stream(client, cid, stop_after=5)
        worker.terminate()
        # No new turn while it drains: another conversation's send waits for a worker.
        read = await read_stream(client, cid)
        assert await asyncio.to_thread(worker.wait, 30) == 0
        stored = await wait_status(client, cid, {"completed"})
        assert read.text == stored["result"]["value"] == LONG
        assert not any(e.event == "turn.restarted" for e in read.events)


@pytest.mark.deep
async def test_sigterm_on_a_worker_hands_a_turn_still_running_at_the_drain_timeout_back(
    fleet: Fleet, scripted_provider: ScriptedProvider
) -> None:
    async with _on_one_web(fleet, "deployer", "w1", "w2", CHAT_SHELL_WORKER_DRAIN_SECONDS="1") as client:
        cid = await _long_turn(client, scripted_provider, 0.05, 0.002)
        head = await read_stream(client, cid, stop_after=5)
        first = fleet.running(_turn_of(head))
        first.terminate()
        assert await asyncio.to_thread(first.wait, 30) == 0
        stored = await wait_status(client, cid, {"completed"})
        read = await read_stream(client, cid)
        assert [e.event for e in read.events].count("turn.restarted") == 1
        assert read.shown == stored["result"]["value"] == LONG


@pytest.mark.deep
async def test_sigterm_on_a_web_process_tells_its_streams_to_reconnect(
    fleet: Fleet, scripted_provider: ScriptedProvider
) -> None:
    async with _on_two_webs(fleet, "listener") as (a, on_a, on_b):
        cid = await _long_turn(on_a, scripted_provider, 0.02)
        underway = asyncio.Event()

        def until_hint(events: list) -> bool:
            if len(events) >= 10:
                underway.set()
            return events[-1].event == "stream.reconnect"

        reading = asyncio.create_task(read_stream(on_a, cid, until=until_hint))
        await asyncio.wait_for(underway.wait(), 60)
        a.terminate()
        head = await asyncio.wait_for(reading, 10)
        hint = head.events[-1]
        assert hint.event == "stream.reconnect" and hint.data["reason"] == "server_stopping"
        replayed = StreamRead(head.status, [e for e in head.events if e.event != "stream.reconnect"])
        tail = await read_stream(on_b, cid, last_event_id=replayed.events[-1].id)
        read = gapless(replayed, tail)
        stored = await wait_status(on_b, cid, {"completed"})
        assert read.text == stored["result"]["value"]
        # It exits once its streams are closed (uvicorn ends by re-raising the signal it caught).
        assert await asyncio.to_thread(a.wait, 15) in (0, -signal.SIGTERM)


@pytest.mark.deep
async def test_a_worker_lost_while_redis_is_down_still_restarts_and_delivers(
    fleet: Fleet, scripted_provider: ScriptedProvider, private_redis: PrivateRedis
) -> None:
    async with _on_one_web(fleet, "stormy", "w1", "w2") as client:
        cid = await _long_turn(client, scripted_provider, 0.05, 0.002)
        head = await read_stream(client, cid, stop_after=10)
        private_redis.kill()
        fleet.running(_turn_of(head)).kill()
        tail = await read_stream(client, cid, last_event_id=head.events[-1].id)
        stored = await wait_status(client, cid, {"completed"})
        read = gapless(head, tail)
        assert [e.event for e in tail.events].count("turn.restarted") == 1
        assert read.shown == stored["result"]["value"] == LONG


@pytest.mark.deep
async def test_a_worker_whose_database_connections_are_killed_mid_turn_leaves_nothing_running(
    fleet: Fleet, scripted_provider: ScriptedProvider, postgres_url: str
) -> None:
    async with _on_one_web(fleet, "cut", "w") as client:
        cid = await _long_turn(client, scripted_provider, 0.02, 0.002)
        head = await read_stream(client, cid, stop_after=10)
        admin = await asyncpg.connect(postgres_url.replace("+asyncpg", ""))
        try:
            killed = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        finally:
            await admin.close()
        assert killed > 0
        stored = await wait_status(client, cid, {"completed", "failed"})
        read = await read_stream(client, cid)
        assert read.events[0].seq == 1 and read.terminal is not None
        assert read.shown == stored["result"]["value"]
        assert read.text.startswith(head.text) or "turn.restarted" in [e.event for e in read.events]


@pytest.mark.deep
async def test_two_workers_run_each_queued_turn_exactly_once(
    fleet: Fleet, scripted_provider: ScriptedProvider
) -> None:
    async with _on_one_web(fleet, "crowd", "w1", "w2") as client:
        scripted_provider.script(*[text(f"reply {n}", token_delay=0.01) for n in range(6)])
        cids = await asyncio.gather(*(started_turn(client, f"question {n}") for n in range(6)))
        reads = await asyncio.gather(*(read_stream(client, cid) for cid in cids))
        for read in reads:
            assert [e.event for e in read.events].count("turn.started") == 1
            assert read.terminal is not None and read.terminal.event == "turn.completed"
        assert sorted(r.text for r in reads) == sorted(f"reply {n}" for n in range(6))
        assert len(scripted_provider.chat_requests) == 6
        assert "started" in fleet.log("w1") and "started" in fleet.log("w2")


async def test_a_stop_sent_to_any_web_process_stops_the_turn_running_or_waiting(
    fleet: Fleet, scripted_provider: ScriptedProvider
) -> None:
    async with _on_two_webs(fleet, "stopper", "--concurrency", "1") as (_, on_a, on_b):
        running = await _long_turn(on_a, scripted_provider, 0.03)
        await read_stream(on_b, running, stop_after=5)
        # The one slot is taken: this turn waits in the queue, and its stop ends it there.
        waiting = await started_turn(on_a, "go")
        assert (await on_b.post(f"/api/conversations/{waiting}/stop")).status_code == 202
        stopped = await wait_status(on_a, waiting, {"cancelled"}, within=5)
        assert stopped["result"]["value"] == ""
        asked = asyncio.get_running_loop().time()
        assert (await on_b.post(f"/api/conversations/{running}/stop")).status_code == 202
        cancelled = await wait_status(on_a, running, {"cancelled"}, within=10)
        assert asyncio.get_running_loop().time() - asked < 5
        assert 0 < len(cancelled["result"]["value"]) < len(LONG)
        assert len(scripted_provider.chat_requests) == 1  # the waiting turn never reached the model


@pytest.mark.deep
async def test_past_its_capacity_the_service_refuses_new_turns_with_503(
    fleet: Fleet, scripted_provider: ScriptedProvider
) -> None:
    web = await fleet.web("web", CHAT_SHELL_TURN_CAPACITY="1")
    async with signed_in(web.base_url, "busy") as client:
        cid = (await client.post("/api/conversations", json={"title": "none"})).json()["id"]
        refused = await client.post(f"/api/conversations/{cid}/messages", json={"content": "anyone?"})
        assert refused.status_code == 503 and refused.json()["code"] == "no_worker"
        assert int(refused.headers["Retry-After"]) > 0
        assert await _messages(client, cid) == []  # nothing was stored
        await fleet.worker("w")
        scripted_provider.script(text(LONG, token_delay=0.01), text("now you"))
        first = await started_turn(client, "go")
        other = (await client.post("/api/conversations", json={"title": "second"})).json()["id"]
        full = await client.post(f"/api/conversations/{other}/messages", json={"content": "me too"})
        assert full.status_code == 503 and full.json()["code"] == "at_capacity"
        assert int(full.headers["Retry-After"]) > 0
        assert await _messages(client, other) == []
        await wait_status(client, first, {"completed"})
        again = await client.post(f"/api/conversations/{other}/messages", json={"content": "me too"})
        assert again.status_code == 202
        assert (await wait_status(client, other, {"completed"}))["result"]["value"] == "now you"


async def test_an_approval_sent_to_any_web_process_resumes_the_turn_on_its_worker(
    fleet: Fleet, scripted_provider: ScriptedProvider, tmp_path: Path
) -> None:
    servers = tmp_path / "mcp.json"
    servers.write_text(json.dumps({"servers": {"ops": stdio_server().model_dump()}}))
    mcp = {"CHAT_SHELL_MCP_SERVERS": str(servers)}
    marks = tmp_path / "marks.txt"
    async with _on_two_webs(fleet, "asker", **mcp) as (_, on_a, on_b):
        cid = (await on_a.post("/api/conversations", json={})).json()["id"]
        ask_first = {"servers": None, "ask_first": ["ops_touch"]}
        assert (await on_a.put(f"/api/conversations/{cid}/mcp-servers", json=ask_first)).status_code == 200
        scripted_provider.script(tool_call("ops_touch", {"path": str(marks)}), text("Done."))
        assert (
            await on_a.post(f"/api/conversations/{cid}/messages", json={"content": "mark it"})
        ).status_code == 202
        asked = await read_stream(on_a, cid, until=lambda e: e[-1].event == "approval.requested")
        call_id = asked.events[-1].data["call_id"]
        assert not marks.exists()
        # Neither web process runs the turn: the decision reaches its worker through Redis.
        decided = await on_b.post(
            f"/api/conversations/{cid}/approvals", json={"call_id": call_id, "allow": True}
        )
        assert decided.status_code == 200 and decided.json()["allowed"] is True
        done = await read_stream(on_a, cid, last_event_id=asked.events[-1].id)
        assert done.terminal is not None and done.terminal.event == "turn.completed"
        assert marks.read_text() == "ran\n"
