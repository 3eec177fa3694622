"""A turn with a tool round, however it ends, stores and replays exactly what the stream showed.

Each turn reads an attached file (a real tool round), then streams more text: it is stopped,
fails at the provider, is interrupted by a crash (orphan recovery at the next start), or
completes. The stored reply must be the concatenation of the `message.delta` texts the SSE
stream delivered, its blocks what those events fold into (`chat_shell.events.fold`), and a
replay after its log was pruned must deliver the same text and fold back to the stored blocks.

Assertions marked RUNTIME need the runtime's half of the one-fold rule (the runtime puts the
paragraph break between model rounds into the deltas and stores their concatenation): until
it lands, a stopped, failed or completed turn stores its rounds joined by a blank line.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from backend.app import create_app
from backend.db import create_engine, session_factory
from backend.models.base import utcnow
from backend.services.delivery.stream_events import visible
from backend.services.delivery.streams import prune_finished
from backend.settings import Settings
from chat_shell.events.fold import VISIBLE_EVENT_TYPES, fold
from tests.support.api import new_user, signed_in
from tests.support.processes import BackendProcess, backend_env
from tests.support.scripted_provider import ScriptedProvider, text, tool_call
from tests.support.servers import serve
from tests.support.sse import Received, StreamRead, read_stream
from tests.support.uploads import upload_ok

LOOKING = "Let me read the notes. "
ANSWER = " ".join(f"point{n}" for n in range(300))


def _folded(events: list[Received]) -> list[dict[str, Any]]:
    """The blocks the delivered text and tool events fold into, as the message stores them."""
    seen = fold(visible(e.event, e.data) for e in events if e.event in VISIBLE_EVENT_TYPES)
    seen.end()
    return [block.model_dump(mode="json", exclude_none=True) for block in seen.blocks]


def _after_tool(events: list[Received], deltas: int) -> bool:
    """The tool round is over and `deltas` text events of the next round have arrived."""
    done = next((i for i, e in enumerate(events) if e.event == "tool.completed"), None)
    return done is not None and sum(e.event == "message.delta" for e in events[done:]) >= deltas


async def _turn_reading_a_file(
    client: httpx.AsyncClient, provider: ScriptedProvider, answer: Any
) -> tuple[int, int]:
    """Starts a turn whose model reads the attached file, then answers with `answer`."""
    cid = (await client.post("/api/conversations", json={"title": "notes"})).json()["id"]
    notes = await upload_ok(client, "notes.txt", b"Budget: 50,000 yen.\nDates: 3-5 April.\n" * 20)
    provider.script(
        tool_call("read_attachment", {"attachment_id": notes["id"]}, text=LOOKING),
        answer,
    )
    sent = await client.post(
        f"/api/conversations/{cid}/messages",
        json={"content": "What do my notes say?", "attachment_ids": [notes["id"]]},
    )
    assert sent.status_code == 202, sent.text
    return cid, sent.json()["turn_id"]


async def _stored(client: httpx.AsyncClient, cid: int) -> dict[str, Any]:
    return (await client.get(f"/api/conversations/{cid}/messages")).json()["items"][-1]


async def _prune(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        async with session_factory(engine)() as db, db.begin():
            assert await prune_finished(db, utcnow() + timedelta(seconds=1)) >= 1
    finally:
        await engine.dispose()


async def _assert_replays(client: httpx.AsyncClient, cid: int, delivered: StreamRead, stored: dict) -> None:
    """After pruning, the synthesized replay shows the same text, ends with the same event, and
    folds back to the stored blocks."""
    replay = await read_stream(client, cid)
    assert replay.text == delivered.text
    assert _folded(replay.events) == stored["result"]["blocks"]
    assert replay.events[-1] == delivered.events[-1]
    assert [e.event for e in replay.events if e.event.startswith("tool.")] == [
        "tool.started",
        "tool.completed",
    ]


async def _stopped(client: httpx.AsyncClient, provider: ScriptedProvider) -> tuple[int, StreamRead, dict]:
    cid, _ = await _turn_reading_a_file(client, provider, text(ANSWER, token_delay=0.02))
    head = await read_stream(client, cid, until=lambda events: _after_tool(events, 5))
    assert (await client.post(f"/api/conversations/{cid}/stop")).status_code == 202
    rest = await read_stream(client, cid, last_event_id=head.events[-1].id)
    delivered = StreamRead(200, head.events + rest.events)
    assert delivered.terminal is not None and delivered.terminal.event == "turn.cancelled"
    assert LOOKING in delivered.text and 0 < len(delivered.text) < len(LOOKING + ANSWER)
    stored = await _stored(client, cid)
    assert stored["status"] == "cancelled"
    return cid, delivered, stored


async def _failed(client: httpx.AsyncClient, provider: ScriptedProvider) -> tuple[int, StreamRead, dict]:
    cid, _ = await _turn_reading_a_file(
        client, provider, text("The budget is 50,000 yen and", stream_fault="error_event")
    )
    delivered = await read_stream(client, cid)
    assert delivered.terminal is not None and delivered.terminal.event == "turn.failed"
    assert delivered.text.startswith(LOOKING) and delivered.text.endswith("The budget is 50,000 yen and")
    stored = await _stored(client, cid)
    assert stored["status"] == "failed"
    return cid, delivered, stored


async def _completed(client: httpx.AsyncClient, provider: ScriptedProvider) -> tuple[int, StreamRead, dict]:
    cid, _ = await _turn_reading_a_file(client, provider, text("Budget 50,000 yen, 3-5 April."))
    delivered = await read_stream(client, cid)
    assert delivered.terminal is not None and delivered.terminal.event == "turn.completed"
    stored = await _stored(client, cid)
    sent = delivered.terminal.data["message"]
    assert sent == {key: stored[key] for key in sent}
    return cid, delivered, stored


ENDINGS = {"stopped": _stopped, "failed": _failed, "completed": _completed}


@pytest.fixture
async def one_backend(
    sqlite_url: str, chat_settings: Callable[..., Settings]
) -> AsyncIterator[httpx.AsyncClient]:
    """A user of a backend on SQLite, for what does not depend on the database (what the
    runtime stores, what the model is sent next)."""
    async with (
        serve(create_app(chat_settings(sqlite_url))) as base_url,
        signed_in(base_url, "chatter") as client,
    ):
        yield client


@pytest.mark.parametrize("ending", ENDINGS)
async def test_a_pruned_turn_replays_what_the_stream_showed(
    chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider, database_url: str, ending: str
) -> None:
    cid, delivered, stored = await ENDINGS[ending](chatter, scripted_provider)
    await _prune(database_url)
    await _assert_replays(chatter, cid, delivered, stored)


@pytest.mark.parametrize("ending", ENDINGS)
async def test_the_stored_reply_is_the_text_the_stream_delivered(
    one_backend: httpx.AsyncClient, scripted_provider: ScriptedProvider, ending: str
) -> None:
    _, delivered, stored = await ENDINGS[ending](one_backend, scripted_provider)
    assert stored["result"]["value"] == delivered.text
    assert _folded(delivered.events) == stored["result"]["blocks"]
    if ending != "completed":
        assert delivered.terminal is not None and delivered.terminal.data["partial"] == delivered.text


async def test_the_next_turn_shows_the_model_the_cut_off_answer_once(
    one_backend: httpx.AsyncClient, scripted_provider: ScriptedProvider
) -> None:
    """What a stopped turn streamed after its tool round reaches the model's next request as
    the user saw it, without the paragraph break that set it apart on the page."""
    cid, delivered, _ = await _stopped(one_backend, scripted_provider)
    scripted_provider.script(text("Go on."))
    await one_backend.post(
        f"/api/conversations/{cid}/messages", json={"content": "go on"}, params={"wait": "true"}
    )
    replies = [m["content"] for m in scripted_provider.last_request["messages"] if m["role"] == "assistant"]
    answered = delivered.text[delivered.text.index(LOOKING) + len(LOOKING) :].strip()
    assert replies == [LOOKING, answered]


async def test_an_interrupted_turn_stores_and_replays_what_its_log_showed(
    sqlite_url: str, tmp_path: Path, scripted_provider: ScriptedProvider
) -> None:
    """The process dies mid-answer after the tool round; the next start folds the stored log
    into the interrupted reply (orphan recovery)."""
    env = backend_env(sqlite_url, tmp_path / "data", scripted_provider.base_url)
    first = await asyncio.to_thread(BackendProcess(env, tmp_path / "first.log").start)
    client = await new_user(first.base_url, "survivor")
    try:
        cid, _ = await _turn_reading_a_file(client, scripted_provider, text(ANSWER, token_delay=0.03))
        seen = await read_stream(client, cid, until=lambda events: _after_tool(events, 5))
        first.kill()
        second = await asyncio.to_thread(BackendProcess(env, tmp_path / "second.log").start)
        client.base_url = httpx.URL(second.base_url)
        try:
            stored = await _stored(client, cid)
            assert stored["status"] == "interrupted" and "restarted" in stored["result"]["note"]
            delivered = await read_stream(client, cid)
            assert delivered.terminal is not None and delivered.terminal.data["code"] == "interrupted"
            assert delivered.text.startswith(seen.text) and len(delivered.text) < len(LOOKING + ANSWER)
            assert stored["result"]["value"] == delivered.terminal.data["partial"] == delivered.text
            assert _folded(delivered.events) == stored["result"]["blocks"]
            await _prune(sqlite_url)
            await _assert_replays(client, cid, delivered, stored)
        finally:
            second.stop()
    finally:
        first.stop()
        await client.aclose()
