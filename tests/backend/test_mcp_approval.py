""" "Ask first": a conversation marks an MCP server or tool, a call of it pauses the turn with a
stored request the stream shows (also after a reload or a reconnect), and the owner's decision
lets it run or tells the model it was denied. A real MCP server over stdio whose `touch` tool
marks a file each time it really runs."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from backend.app import create_app
from backend.settings import Settings
from chat_shell.tools.approvals import denied_message
from tests.support.api import login, signed_in
from tests.support.mcp_servers import stdio_server
from tests.support.scripted_provider import ScriptedProvider, text, tool_call
from tests.support.servers import PrivateRedis, serve
from tests.support.sse import Received, read_stream


@dataclass
class Chat:
    owner: httpx.AsyncClient
    other: httpx.AsyncClient
    marks: Path


@contextlib.asynccontextmanager
async def _chat(
    settings: Callable[..., Settings], database_url: str, tmp_path: Path, **overrides: object
) -> AsyncIterator[Chat]:
    servers_file = tmp_path / "mcp.json"
    servers_file.write_text(json.dumps({"servers": {"ops": stdio_server().model_dump()}}))
    app = create_app(settings(database_url, mcp_servers=servers_file, sse_ping_seconds=0.5, **overrides))
    async with (
        serve(app) as base_url,
        signed_in(base_url, "asker") as owner,
        signed_in(base_url, "stranger") as other,
    ):
        yield Chat(owner, other, tmp_path / "marks.txt")


@contextlib.asynccontextmanager
async def _replicas(
    settings: Callable[..., Settings], postgres_url: str, redis_url: str, tmp_path: Path
) -> AsyncIterator[tuple[Chat, httpx.AsyncClient]]:
    """Two backends on one PostgreSQL and Redis: the owner's client of replica A (where its
    turns run: B runs no worker, so a turn never lands on B, where a decision needs no Redis)
    and, with the same account, one of replica B."""
    from tests.conftest import _off_loop
    from tests.support import databases

    _off_loop(lambda: databases.truncate_all(postgres_url))
    async with _chat(settings, postgres_url, tmp_path, redis_url=redis_url) as on_a:
        b = create_app(
            settings(
                postgres_url,
                mcp_servers=tmp_path / "mcp.json",
                sse_ping_seconds=0.5,
                redis_url=redis_url,
                worker_in_process=False,
            )
        )
        async with serve(b) as url_b:
            on_b = await login(url_b, "asker")
            try:
                yield on_a, on_b
            finally:
                await on_b.aclose()


@pytest.fixture
async def chat(
    database_url: str, chat_settings: Callable[..., Settings], tmp_path: Path
) -> AsyncIterator[Chat]:
    async with _chat(chat_settings, database_url, tmp_path) as made:
        yield made


def _asked(events: list[Received]) -> bool:
    return any(event.event == "approval.requested" for event in events)


async def _paused_turn(chat: Chat, provider: ScriptedProvider, ask_first: list[str]) -> tuple[int, str]:
    """A turn whose `ops_touch` call waits for a decision: (conversation id, call id)."""
    cid = (await chat.owner.post("/api/conversations", json={})).json()["id"]
    marked = await chat.owner.put(
        f"/api/conversations/{cid}/mcp-servers", json={"servers": None, "ask_first": ask_first}
    )
    assert marked.status_code == 200 and marked.json()["ask_first"] == ask_first
    reread = await chat.owner.get(f"/api/conversations/{cid}/mcp-servers")
    assert reread.json()["ask_first"] == ask_first
    asked_before = len(provider.chat_requests)
    provider.script(tool_call("ops_touch", {"path": str(chat.marks)}), text("Done."))
    sent = await chat.owner.post(f"/api/conversations/{cid}/messages", json={"content": "mark it"})
    assert sent.status_code == 202
    first = await read_stream(chat.owner, cid, until=_asked)
    request = next(event for event in first.events if event.event == "approval.requested")
    assert request.data["name"] == "ops_touch" and request.data["args"] == {"path": str(chat.marks)}
    assert request.data["server"] == "ops"
    # A reload (the stream from the start) and a reconnect (from the last event seen) show it again.
    reloaded = await read_stream(chat.owner, cid, until=_asked)
    assert [e.data for e in reloaded.events if e.event == "approval.requested"] == [request.data]
    reconnected = await read_stream(
        chat.owner, cid, last_event_id=first.events[-2].id, until=_asked, stop_after=1
    )
    assert [e.event for e in reconnected.events] == ["approval.requested"]
    assert not chat.marks.exists()  # the tool has not run
    assert len(provider.chat_requests) == asked_before + 1  # the model waits too
    return cid, request.data["call_id"]


async def _finished(chat: Chat, cid: int) -> tuple[list[Received], dict]:
    events = (await read_stream(chat.owner, cid)).events
    messages = (await chat.owner.get(f"/api/conversations/{cid}/messages")).json()
    return events, messages["items"][-1]


async def test_an_ask_first_tool_pauses_the_turn_and_runs_once_the_owner_allows_it(
    chat: Chat, scripted_provider: ScriptedProvider
) -> None:
    cid, call_id = await _paused_turn(chat, scripted_provider, ["ops_touch"])
    decision = {"call_id": call_id, "allow": True}
    stranger = await chat.other.post(f"/api/conversations/{cid}/approvals", json=decision)
    assert stranger.status_code == 404
    assert not chat.marks.exists()

    allowed = await chat.owner.post(f"/api/conversations/{cid}/approvals", json=decision)
    assert allowed.status_code == 200 and allowed.json()["allowed"] is True
    again = await chat.owner.post(f"/api/conversations/{cid}/approvals", json=decision)
    assert again.status_code == 409 and again.json()["code"] == "no_pending_approval"

    events, message = await _finished(chat, cid)
    assert events[-1].event == "turn.completed"
    assert [e.data["allowed"] for e in events if e.event == "approval.decided"] == [True]
    assert [e.data["output"] for e in events if e.event == "tool.completed"] == ["1 run(s)"]
    assert chat.marks.read_text() == "ran\n"  # exactly once
    assert scripted_provider.chat_requests[-1]["messages"][-1]["content"] == "1 run(s)"
    block = next(b for b in message["result"]["blocks"] if b["type"] == "tool")
    assert (block["approval"], block["status"], block["output"]) == ("allowed", "completed", "1 run(s)")
    finished = await chat.owner.post(f"/api/conversations/{cid}/approvals", json=decision)
    assert finished.status_code == 409


async def test_a_denied_call_never_runs_and_the_model_is_told_the_user_denied_it(
    chat: Chat, scripted_provider: ScriptedProvider
) -> None:
    cid, call_id = await _paused_turn(chat, scripted_provider, ["ops"])  # the whole server
    unknown = await chat.owner.post(
        f"/api/conversations/{cid}/approvals", json={"call_id": "call_other", "allow": True}
    )
    assert unknown.status_code == 409
    denied = await chat.owner.post(
        f"/api/conversations/{cid}/approvals", json={"call_id": call_id, "allow": False}
    )
    assert denied.status_code == 200

    events, message = await _finished(chat, cid)
    assert events[-1].event == "turn.completed"
    assert message["status"] == "completed"
    assert [e.data["allowed"] for e in events if e.event == "approval.decided"] == [False]
    assert not chat.marks.exists()
    told = scripted_provider.chat_requests[-1]["messages"][-1]
    assert told["role"] == "tool" and told["content"] == denied_message("ops_touch")
    block = next(b for b in message["result"]["blocks"] if b["type"] == "tool")
    assert (block["approval"], block["status"]) == ("denied", "error")
    exported = await chat.owner.get(f"/api/conversations/{cid}/export", params={"format": "md"})
    assert "Tool call: ops_touch (error, denied by the user)" in exported.text


async def test_ask_first_names_must_be_configured_servers_or_their_tools(chat: Chat) -> None:
    cid = (await chat.owner.post("/api/conversations", json={})).json()["id"]
    bad = await chat.owner.put(
        f"/api/conversations/{cid}/mcp-servers", json={"servers": None, "ask_first": ["nope_touch"]}
    )
    assert bad.status_code == 422 and bad.json()["code"] == "unknown_mcp_tool"
    kept = await chat.owner.put(f"/api/conversations/{cid}/mcp-servers", json={"servers": ["ops"]})
    assert kept.json()["ask_first"] == []


async def test_a_stop_ends_a_paused_turn_and_nothing_waits_any_more(
    chat: Chat, scripted_provider: ScriptedProvider
) -> None:
    cid, call_id = await _paused_turn(chat, scripted_provider, ["ops_touch"])
    assert (await chat.owner.post(f"/api/conversations/{cid}/stop")).status_code == 202
    events, message = await _finished(chat, cid)
    assert events[-1].event == "turn.cancelled" and message["status"] == "cancelled"
    late = await chat.owner.post(
        f"/api/conversations/{cid}/approvals", json={"call_id": call_id, "allow": True}
    )
    assert late.status_code == 409
    assert not chat.marks.exists()


async def test_the_pause_counts_against_the_turns_wall_time(
    sqlite_url: str,
    chat_settings: Callable[..., Settings],
    scripted_provider: ScriptedProvider,
    tmp_path: Path,
) -> None:
    async with _chat(chat_settings, sqlite_url, tmp_path, turn_max_seconds=5) as chat:
        cid, _ = await _paused_turn(chat, scripted_provider, ["ops"])
        events, message = await _finished(chat, cid)
    assert events[-1].event == "turn.failed" and events[-1].data["code"] == "turn_time_limit"
    block = next(b for b in message["result"]["blocks"] if b["type"] == "tool")
    assert (block["approval"], block["status"]) == ("pending", "error")


async def test_a_decision_sent_to_another_replica_resumes_the_turn_running_on_the_first(
    postgres_url: str,
    chat_settings: Callable[..., Settings],
    scripted_provider: ScriptedProvider,
    private_redis: PrivateRedis,
    tmp_path: Path,
) -> None:
    async with _replicas(chat_settings, postgres_url, private_redis.url, tmp_path) as (chat, on_b):
        cid, call_id = await _paused_turn(chat, scripted_provider, ["ops_touch"])
        decision = {"call_id": call_id, "allow": True}
        unknown = await on_b.post(f"/api/conversations/{cid}/approvals", json={"call_id": "x", "allow": True})
        assert unknown.status_code == 409 and unknown.json()["code"] == "no_pending_approval"
        assert (
            await chat.other.post(f"/api/conversations/{cid}/approvals", json=decision)
        ).status_code == 404

        allowed = await on_b.post(f"/api/conversations/{cid}/approvals", json=decision)
        assert allowed.status_code == 200 and allowed.json()["allowed"] is True
        again = await on_b.post(f"/api/conversations/{cid}/approvals", json=decision)
        assert again.status_code == 409 and again.json()["code"] == "no_pending_approval"
        events, message = await _finished(chat, cid)
        assert events[-1].event == "turn.completed"
        assert chat.marks.read_text() == "ran\n"  # it ran on replica A, once
        block = next(b for b in message["result"]["blocks"] if b["type"] == "tool")
        assert (block["approval"], block["status"]) == ("allowed", "completed")
        idle = await on_b.post(f"/api/conversations/{cid}/approvals", json=decision)
        assert idle.status_code == 409  # nothing waits

        # Without Redis a decision cannot reach replica A from B: refused as undelivered, and
        # the call still waits for one sent to A.
        chat.marks.unlink()
        cid, call_id = await _paused_turn(chat, scripted_provider, ["ops_touch"])
        private_redis.kill()
        decision = {"call_id": call_id, "allow": True}
        lost = await on_b.post(f"/api/conversations/{cid}/approvals", json=decision)
        assert lost.status_code == 503 and lost.json()["code"] == "approval_not_delivered"
        assert (
            await chat.owner.post(f"/api/conversations/{cid}/approvals", json=decision)
        ).status_code == 200
        events, _ = await _finished(chat, cid)
        assert events[-1].event == "turn.completed" and chat.marks.read_text() == "ran\n"
