"""Turns on the job queue across real processes: web processes that only relay, worker
processes that run the turns, PostgreSQL and Redis. Each process is killed, stopped and
disconnected the way a crash, a deploy or a network fault would."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from tests.support.api import new_user, wait_status
from tests.support.mcp_servers import stdio_server
from tests.support.processes import BackendProcess, WorkerProcess, shared_env
from tests.support.scripted_provider import ScriptedProvider, text, tool_call
from tests.support.servers import PrivateRedis
from tests.support.sse import StreamRead, read_stream

LONG = " ".join(f"token{n}" for n in range(300))
RESTART_AFTER = 3.0
# The bound: a lost worker's turn restarts within 15 s.
RESTART_BOUND = 15.0


class Fleet:
    """The processes of one test, all on one database and one Redis; stopped at its end."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env = env
        self._logs = logs
        self._started: list[BackendProcess] = []
        self._workers: dict[str, BackendProcess] = {}

    async def web(self, name: str, **extra: str) -> BackendProcess:
        process = BackendProcess({**self.env, **extra}, self._logs / f"{name}.log")
        self._started.append(process)
        return await asyncio.to_thread(process.start)

    async def worker(self, name: str, *args: str, **extra: str) -> BackendProcess:
        process = WorkerProcess({**self.env, **extra}, self._logs / f"{name}.log", *args)
        self._started.append(process)
        self._workers[name] = process
        return await asyncio.to_thread(process.start)

    async def workers(self, *names: str, **extra: str) -> list[BackendProcess]:
        return list(await asyncio.gather(*(self.worker(name, **extra) for name in names)))

    def running(self, turn_id: int) -> BackendProcess:
        """The live worker that took the turn (each logs the jobs it starts)."""
        taken = f"turn_id={turn_id})"
        for name, worker in self._workers.items():
            lines = self.log(name).splitlines()
            if worker.alive and any("Starting job run_turn" in line and taken in line for line in lines):
                return worker
        raise AssertionError(f"no live worker took turn {turn_id}")

    def log(self, name: str) -> str:
        return (self._logs / f"{name}.log").read_text(errors="replace")

    def stop(self) -> None:
        for process in self._started:
            process.stop()


@pytest.fixture
async def fleet(
    postgres_url: str, tmp_path: Path, scripted_provider: ScriptedProvider, private_redis: PrivateRedis
) -> AsyncIterator[Fleet]:
    env = shared_env(
        postgres_url,
        tmp_path / "data",
        scripted_provider.base_url,
        private_redis.url,
        CHAT_SHELL_WORKER_RESTART_AFTER_SECONDS=str(RESTART_AFTER),
        # Web processes only relay; workers run the turns.
        CHAT_SHELL_WORKER_IN_PROCESS="false",
    )
    fleet = Fleet(env, tmp_path)
    try:
        yield fleet
    finally:
        fleet.stop()


async def _send(client: httpx.AsyncClient, content: str = "go") -> int:
    cid = (await client.post("/api/conversations", json={"title": "queued"})).json()["id"]
    sent = await client.post(f"/api/conversations/{cid}/messages", json={"content": content})
    assert sent.status_code == 202, sent.text
    return cid


def _turn_of(read: StreamRead) -> int:
    """The turn a stream's events belong to (their ids are `turn:seq`)."""
    return int(read.events[0].id.split(":")[0])


def _as_client(client: httpx.AsyncClient, other: BackendProcess) -> httpx.AsyncClient:
    """The same session, as a client of another web process."""
    return httpx.AsyncClient(
        base_url=other.base_url, cookies=client.cookies, headers=client.headers, timeout=30
    )


async def _messages(client: httpx.AsyncClient, cid: int) -> list[dict]:
    return (await client.get(f"/api/conversations/{cid}/messages")).json()["items"]


async def test_a_web_process_killed_mid_reply_resumes_exactly_on_another(
    fleet: Fleet, scripted_provider: ScriptedProvider
) -> None:
    a, b = await asyncio.gather(fleet.web("a"), fleet.web("b"))
    await fleet.worker("w")
    on_a = await new_user(a.base_url, "roamer")
    on_b = _as_client(on_a, b)
    try:
        scripted_provider.script(text(LONG, token_delay=0.01))
        cid = await _send(on_a)
        head = await read_stream(on_a, cid, stop_after=20)
        a.kill()
        tail = await read_stream(on_b, cid, last_event_id=head.events[-1].id)
        events = head.events + tail.events
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert not any(e.event == "turn.restarted" for e in events)
        stored = await wait_status(on_b, cid, {"completed"})
        assert head.text + tail.text == stored["result"]["value"] == LONG
        assert len(scripted_provider.chat_requests) == 1  # the turn ran once, in its worker
    finally:
        await on_a.aclose()
        await on_b.aclose()


async def test_a_worker_killed_mid_reply_restarts_on_another_and_replaces_the_partial_text(
    fleet: Fleet, scripted_provider: ScriptedProvider
) -> None:
    web = await fleet.web("web")
    await fleet.workers("w1", "w2")
    client = await new_user(web.base_url, "survivor")
    try:
        scripted_provider.script(text(LONG, token_delay=0.05), text(LONG, token_delay=0.002))
        cid = await _send(client, "a long answer please")
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
        read = type(tail)(200, head.events + tail.events)
        assert [e.seq for e in read.events] == list(range(1, len(read.events) + 1))
        restart = next(e for e in tail.events if e.event == "turn.restarted")
        assert restart.data["code"] == "worker_lost" and "restarted" in restart.data["message"]
        stored = await wait_status(client, cid, {"completed"})
        # The partial text of the lost attempt is gone: the page and the store hold the new reply.
        assert read.shown == stored["result"]["value"] == LONG
        user, assistant = await _messages(client, cid)
        assert user["content"] == "a long answer please" and assistant["status"] == "completed"
    finally:
        await client.aclose()


@pytest.mark.deep
async def test_a_turn_whose_worker_dies_on_both_attempts_ends_failed(
    fleet: Fleet, scripted_provider: ScriptedProvider
) -> None:
    web = await fleet.web("web")
    await fleet.workers("w1", "w2", "w3")
    client = await new_user(web.base_url, "unlucky")
    try:
        scripted_provider.script(text(LONG, token_delay=0.05), text(LONG, token_delay=0.05))
        cid = await _send(client)
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
    finally:
        await client.aclose()


async def test_sigterm_on_a_worker_finishes_its_turn_before_it_exits(
    fleet: Fleet, scripted_provider: ScriptedProvider
) -> None:
    web = await fleet.web("web")
    worker = await fleet.worker("w", CHAT_SHELL_WORKER_DRAIN_SECONDS="60")
    client = await new_user(web.base_url, "deployer")
    try:
        scripted_provider.script(text(LONG, token_delay=0.01))
        cid = await _send(client)
        await read_stream(client, cid, stop_after=5)
        worker.terminate()
        # No new turn while it drains: another conversation's send waits for a worker.
        read = await read_stream(client, cid)
        assert await asyncio.to_thread(worker.wait, 30) == 0
        stored = await wait_status(client, cid, {"completed"})
        assert read.text == stored["result"]["value"] == LONG
        assert not any(e.event == "turn.restarted" for e in read.events)
    finally:
        await client.aclose()


@pytest.mark.deep
async def test_sigterm_on_a_worker_hands_a_turn_still_running_at_the_drain_timeout_back(
    fleet: Fleet, scripted_provider: ScriptedProvider
) -> None:
    web = await fleet.web("web")
    await fleet.workers("w1", "w2", CHAT_SHELL_WORKER_DRAIN_SECONDS="1")
    client = await new_user(web.base_url, "deployer")
    try:
        scripted_provider.script(text(LONG, token_delay=0.05), text(LONG, token_delay=0.002))
        cid = await _send(client)
        head = await read_stream(client, cid, stop_after=5)
        first = fleet.running(_turn_of(head))
        first.terminate()
        assert await asyncio.to_thread(first.wait, 30) == 0
        stored = await wait_status(client, cid, {"completed"})
        read = await read_stream(client, cid)
        assert [e.event for e in read.events].count("turn.restarted") == 1
        assert read.shown == stored["result"]["value"] == LONG
    finally:
        await client.aclose()


@pytest.mark.deep
async def test_sigterm_on_a_web_process_tells_its_streams_to_reconnect(
    fleet: Fleet, scripted_provider: ScriptedProvider
) -> None:
    a, b = await asyncio.gather(fleet.web("a"), fleet.web("b"))
    await fleet.worker("w")
    on_a = await new_user(a.base_url, "listener")
    on_b = _as_client(on_a, b)
    try:
        scripted_provider.script(text(LONG, token_delay=0.02))
        cid = await _send(on_a)
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
        replayed = [e for e in head.events if e.event != "stream.reconnect"]
        tail = await read_stream(on_b, cid, last_event_id=replayed[-1].id)
        events = replayed + tail.events
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        stored = await wait_status(on_b, cid, {"completed"})
        assert (
            "".join(e.data["text"] for e in events if e.event == "message.delta") == stored["result"]["value"]
        )
        # It exits once its streams are closed (uvicorn ends by re-raising the signal it caught).
        assert await asyncio.to_thread(a.wait, 15) in (0, -signal.SIGTERM)
    finally:
        await on_a.aclose()
        await on_b.aclose()


@pytest.mark.deep
async def test_a_worker_lost_while_redis_is_down_still_restarts_and_delivers(
    fleet: Fleet, scripted_provider: ScriptedProvider, private_redis: PrivateRedis
) -> None:
    web = await fleet.web("web")
    await fleet.workers("w1", "w2")
    client = await new_user(web.base_url, "stormy")
    try:
        scripted_provider.script(text(LONG, token_delay=0.05), text(LONG, token_delay=0.002))
        cid = await _send(client)
        head = await read_stream(client, cid, stop_after=10)
        private_redis.kill()
        fleet.running(_turn_of(head)).kill()
        tail = await read_stream(client, cid, last_event_id=head.events[-1].id)
        stored = await wait_status(client, cid, {"completed"})
        read = type(tail)(200, head.events + tail.events)
        assert [e.seq for e in read.events] == list(range(1, len(read.events) + 1))
        assert [e.event for e in tail.events].count("turn.restarted") == 1
        assert read.shown == stored["result"]["value"] == LONG
    finally:
        await client.aclose()


@pytest.mark.deep
async def test_a_worker_whose_database_connections_are_killed_mid_turn_leaves_nothing_running(
    fleet: Fleet, scripted_provider: ScriptedProvider, postgres_url: str
) -> None:
    web = await fleet.web("web")
    await fleet.worker("w")
    client = await new_user(web.base_url, "cut")
    try:
        scripted_provider.script(text(LONG, token_delay=0.02), text(LONG, token_delay=0.002))
        cid = await _send(client)
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
    finally:
        await client.aclose()


@pytest.mark.deep
async def test_two_workers_run_each_queued_turn_exactly_once(
    fleet: Fleet, scripted_provider: ScriptedProvider
) -> None:
    web = await fleet.web("web")
    await asyncio.gather(fleet.worker("w1"), fleet.worker("w2"))
    client = await new_user(web.base_url, "crowd")
    try:
        scripted_provider.script(*[text(f"reply {n}", token_delay=0.01) for n in range(6)])
        cids = await asyncio.gather(*(_send(client, f"question {n}") for n in range(6)))
        reads = await asyncio.gather(*(read_stream(client, cid) for cid in cids))
        for read in reads:
            assert [e.event for e in read.events].count("turn.started") == 1
            assert read.terminal is not None and read.terminal.event == "turn.completed"
        assert sorted(r.text for r in reads) == sorted(f"reply {n}" for n in range(6))
        assert len(scripted_provider.chat_requests) == 6
        assert "started" in fleet.log("w1") and "started" in fleet.log("w2")
    finally:
        await client.aclose()


async def test_a_stop_sent_to_any_web_process_stops_the_turn_running_or_waiting(
    fleet: Fleet, scripted_provider: ScriptedProvider
) -> None:
    a, b = await asyncio.gather(fleet.web("a"), fleet.web("b"))
    await fleet.worker("w", "--concurrency", "1")
    on_a = await new_user(a.base_url, "stopper")
    on_b = _as_client(on_a, b)
    try:
        scripted_provider.script(text(LONG, token_delay=0.03))
        running = await _send(on_a)
        await read_stream(on_b, running, stop_after=5)
        # The one slot is taken: this turn waits in the queue, and its stop ends it there.
        waiting = await _send(on_a)
        assert (await on_b.post(f"/api/conversations/{waiting}/stop")).status_code == 202
        stopped = await wait_status(on_a, waiting, {"cancelled"}, within=5)
        assert stopped["result"]["value"] == ""
        asked = asyncio.get_running_loop().time()
        assert (await on_b.post(f"/api/conversations/{running}/stop")).status_code == 202
        cancelled = await wait_status(on_a, running, {"cancelled"}, within=10)
        assert asyncio.get_running_loop().time() - asked < 5
        assert 0 < len(cancelled["result"]["value"]) < len(LONG)
        assert len(scripted_provider.chat_requests) == 1  # the waiting turn never reached the model
    finally:
        await on_a.aclose()
        await on_b.aclose()


@pytest.mark.deep
async def test_past_its_capacity_the_service_refuses_new_turns_with_503(
    fleet: Fleet, scripted_provider: ScriptedProvider
) -> None:
    web = await fleet.web("web", CHAT_SHELL_TURN_CAPACITY="1")
    client = await new_user(web.base_url, "busy")
    try:
        cid = (await client.post("/api/conversations", json={"title": "none"})).json()["id"]
        refused = await client.post(f"/api/conversations/{cid}/messages", json={"content": "anyone?"})
        assert refused.status_code == 503 and refused.json()["code"] == "no_worker"
        assert int(refused.headers["Retry-After"]) > 0
        assert await _messages(client, cid) == []  # nothing was stored
        await fleet.worker("w")
        scripted_provider.script(text(LONG, token_delay=0.01), text("now you"))
        first = await _send(client)
        other = (await client.post("/api/conversations", json={"title": "second"})).json()["id"]
        full = await client.post(f"/api/conversations/{other}/messages", json={"content": "me too"})
        assert full.status_code == 503 and full.json()["code"] == "at_capacity"
        assert int(full.headers["Retry-After"]) > 0
        assert await _messages(client, other) == []
        await wait_status(client, first, {"completed"})
        again = await client.post(f"/api/conversations/{other}/messages", json={"content": "me too"})
        assert again.status_code == 202
        assert (await wait_status(client, other, {"completed"}))["result"]["value"] == "now you"
    finally:
        await client.aclose()


async def test_an_approval_sent_to_any_web_process_resumes_the_turn_on_its_worker(
    fleet: Fleet, scripted_provider: ScriptedProvider, tmp_path: Path
) -> None:
    servers = tmp_path / "mcp.json"
    servers.write_text(json.dumps({"servers": {"ops": stdio_server().model_dump()}}))
    mcp = {"CHAT_SHELL_MCP_SERVERS": str(servers)}
    a, b = await asyncio.gather(fleet.web("a", **mcp), fleet.web("b", **mcp))
    await fleet.worker("w", **mcp)
    on_a = await new_user(a.base_url, "asker")
    on_b = _as_client(on_a, b)
    marks = tmp_path / "marks.txt"
    try:
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
    finally:
        await on_a.aclose()
        await on_b.aclose()
