"""Turn delivery: background turns, the durable event log, resumable SSE, stop, and bad input."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import httpx
import pytest

from tests.conftest import DEEP
from tests.support.scripted_provider import ScriptedProvider, text, tool_call
from tests.support.sse import read_stream

ANSWER = "Kyoto in spring: cherry blossoms along the Philosopher's Path, 京都の春は美しい. " * 3


async def _conversation(client: httpx.AsyncClient, title: str = "chat") -> int:
    return (await client.post("/api/conversations", json={"title": title})).json()["id"]


async def _send(
    client: httpx.AsyncClient, cid: int, content: str = "Tell me about Kyoto", **params: str
) -> dict:
    response = await client.post(
        f"/api/conversations/{cid}/messages", json={"content": content}, params=params
    )
    assert response.status_code in (200, 202), response.text
    return response.json()


async def _stored(client: httpx.AsyncClient, cid: int) -> list[dict]:
    return (await client.get(f"/api/conversations/{cid}/messages")).json()["items"]


async def test_wait_true_returns_the_completed_reply(
    chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider
) -> None:
    scripted_provider.script(text(ANSWER))
    cid = await _conversation(chatter)
    response = await chatter.post(
        f"/api/conversations/{cid}/messages", json={"content": "Kyoto?"}, params={"wait": "true"}
    )
    assert response.status_code == 200
    body = response.json()
    assert body["user_message"]["content"] == "Kyoto?"
    assert body["assistant_message"]["status"] == "completed"
    assert body["assistant_message"]["result"]["value"] == ANSWER
    assert "messages_chain" not in body["assistant_message"]["result"]
    stored = await _stored(chatter, cid)
    assert [(m["role"], m["status"]) for m in stored] == [("user", "completed"), ("assistant", "completed")]


async def test_stream_delivers_numbered_events_and_the_exact_text(
    chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider
) -> None:
    scripted_provider.script(
        tool_call("generate_report", {"rows": 3, "seed": 1}, text="Checking. "), text(ANSWER)
    )
    cid = await _conversation(chatter)
    started = await _send(chatter, cid)
    read = await read_stream(chatter, cid)
    turn_id = started["turn_id"]
    assert [e.id for e in read.events] == [f"{turn_id}:{n}" for n in range(1, len(read.events) + 1)]
    names = [e.event for e in read.events]
    assert names[0] == "turn.started" and names[-1] == "turn.completed"
    assert {"tool.started", "tool.completed", "context.metrics"} <= set(names)
    final = read.terminal.data["message"]  # type: ignore[union-attr]
    # What streamed is what is stored: the paragraph between the rounds is part of a delta.
    assert read.text == final["result"]["value"] == "Checking. \n\n" + ANSWER
    stored = (await _stored(chatter, cid))[-1]
    assert stored["result"]["value"] == final["result"]["value"]
    assert stored["result"]["context_metrics"]["phase"] == "final"
    tool_block = next(b for b in stored["result"]["blocks"] if b["type"] == "tool")
    assert tool_block["name"] == "generate_report" and tool_block["output"]


async def _answered(client: httpx.AsyncClient, provider: ScriptedProvider) -> int:
    """A conversation whose turn answered `ANSWER` and finished."""
    provider.script(text(ANSWER))
    cid = await _conversation(client)
    await _send(client, cid, wait="true")
    return cid


async def _running(
    client: httpx.AsyncClient, provider: ScriptedProvider, answer: str, token_delay: float
) -> int:
    """A conversation whose turn is streaming `answer`, a token every `token_delay` seconds."""
    provider.script(text(answer, token_delay=token_delay))
    cid = await _conversation(client)
    await _send(client, cid)
    return cid


async def test_a_finished_turn_replays_completely_then_closes(
    chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider
) -> None:
    cid = await _answered(chatter, scripted_provider)
    first = await read_stream(chatter, cid)
    again = await read_stream(chatter, cid)
    assert first.events == again.events and first.text == ANSWER
    # A client that already has everything gets 204, which stops EventSource from reconnecting.
    done = await read_stream(chatter, cid, last_event_id=first.events[-1].id)
    assert done.status == 204


async def test_a_second_send_while_a_turn_runs_is_refused(
    chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider
) -> None:
    cid = await _running(chatter, scripted_provider, ANSWER, 0.02)
    second = await chatter.post(f"/api/conversations/{cid}/messages", json={"content": "again"})
    assert second.status_code == 409, (second.status_code, second.text)
    assert second.json()["code"] == "turn_running"
    await read_stream(chatter, cid)
    assert len(await _stored(chatter, cid)) == 2  # nothing of the refused send remains


async def test_stop_keeps_the_partial_reply(
    chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider
) -> None:
    cid = await _running(chatter, scripted_provider, ANSWER * 4, 0.02)
    head = await read_stream(chatter, cid, stop_after=8)
    stop = await chatter.post(f"/api/conversations/{cid}/stop")
    assert stop.status_code == 202
    rest = await read_stream(chatter, cid, last_event_id=head.events[-1].id)
    assert rest.terminal is not None and rest.terminal.event == "turn.cancelled"
    shown = head.text + rest.text
    assert rest.terminal.data["partial"] == shown
    assert 0 < len(shown) < len(ANSWER * 4)
    stored = (await _stored(chatter, cid))[-1]
    assert stored["status"] == "cancelled" and stored["result"]["value"] == shown
    again = await chatter.post(f"/api/conversations/{cid}/stop")
    assert again.status_code == 409 and again.json()["code"] == "no_running_turn"


async def test_closing_the_stream_is_not_a_stop(
    chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider
) -> None:
    cid = await _running(chatter, scripted_provider, ANSWER, 0.01)
    await read_stream(chatter, cid, stop_after=3)  # the page closes
    for _ in range(300):
        stored = (await _stored(chatter, cid))[-1]
        if stored["status"] != "running":
            break
        await asyncio.sleep(0.05)
    assert stored["status"] == "completed" and stored["result"]["value"] == ANSWER


async def test_reconnects_at_random_points_lose_and_duplicate_nothing(
    chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider
) -> None:
    """Scripted turns read through random disconnect/reconnect points: 40 reconnects in the
    default suite, 1,000 in the deep run. The reassembled text is byte-identical every time."""
    rng = random.Random(7)
    wanted = 1000 if DEEP else 40
    cid = await _conversation(chatter)
    reconnects, turn = 0, 0
    while reconnects < wanted:
        answer = f"Turn {turn}: " + " ".join(
            f"w{rng.randint(0, 999)}·京{rng.randint(0, 9)}" for _ in range(80)
        )
        scripted_provider.script(text(answer, token_delay=rng.choice((0.0, 0.001, 0.003))))
        await _send(chatter, cid, content=f"q{turn}")
        received, last_id = [], None
        while True:
            part = await read_stream(chatter, cid, last_event_id=last_id, stop_after=rng.randint(1, 12))
            received.extend(part.events)
            if part.terminal is not None:
                break
            last_id = part.events[-1].id
            reconnects += 1
        seqs = [e.seq for e in received]
        assert seqs == list(range(1, len(seqs) + 1))
        stored = (await _stored(chatter, cid))[-1]
        assert (
            "".join(e.data["text"] for e in received if e.event == "message.delta")
            == stored["result"]["value"]
        )
        turn += 1


async def test_after_query_resumes_like_last_event_id(
    chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider
) -> None:
    cid = await _answered(chatter, scripted_provider)
    whole = await read_stream(chatter, cid)
    tail = await read_stream(chatter, cid, after=4)
    assert tail.events == whole.events[4:]


@pytest.mark.parametrize("bad", ["nonsense", "12", "a:b", ":", "1:-1"])
async def test_malformed_last_event_id_is_a_clear_error(
    chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider, bad: str
) -> None:
    cid = await _conversation(chatter)
    await _send(chatter, cid, wait="true")
    response = await chatter.get(f"/api/conversations/{cid}/stream", headers={"Last-Event-ID": bad})
    assert response.status_code == 400 and response.json()["code"] == "invalid_last_event_id"


async def test_future_and_foreign_event_ids(
    chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider, chat_server: str
) -> None:
    cid = await _conversation(chatter)
    turn_id = (await _send(chatter, cid, wait="true"))["turn_id"]
    future = await chatter.get(
        f"/api/conversations/{cid}/stream", headers={"Last-Event-ID": f"{turn_id}:999"}
    )
    assert future.status_code == 400 and future.json()["code"] == "invalid_last_event_id"
    other = await _conversation(chatter, "other")
    foreign = await chatter.get(
        f"/api/conversations/{other}/stream", headers={"Last-Event-ID": f"{turn_id}:1"}
    )
    assert foreign.status_code == 404
    empty = await chatter.get(f"/api/conversations/{other}/stream")
    assert empty.status_code == 204


async def test_other_users_cannot_send_stop_or_stream(
    chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider, chat_server: str
) -> None:
    from tests.support.api import new_user

    cid = await _conversation(chatter)
    await _send(chatter, cid, wait="true")
    intruder = await new_user(chat_server, "intruder")
    try:
        for method, path in [
            ("POST", f"/api/conversations/{cid}/messages"),
            ("POST", f"/api/conversations/{cid}/stop"),
            ("POST", f"/api/conversations/{cid}/regenerate"),
            ("GET", f"/api/conversations/{cid}/stream"),
        ]:
            body = {} if path.endswith("/regenerate") else {"content": "hi"}
            response = await intruder.request(method, path, json=body if method == "POST" else None)
            assert response.status_code == 404, (method, path)
    finally:
        await intruder.aclose()


async def test_empty_messages_are_refused(chatter: httpx.AsyncClient) -> None:
    cid = await _conversation(chatter)
    for body in ({"content": ""}, {"content": "   \n"}, {}):
        response = await chatter.post(f"/api/conversations/{cid}/messages", json=body)
        assert response.status_code == 422 and response.json()["code"] == "empty_message"
    assert await _stored(chatter, cid) == []


async def test_a_provider_failure_is_stored_with_the_partial_text(
    chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider
) -> None:
    scripted_provider.script(text("Partial answer so far", stream_fault="error_event"))
    cid = await _conversation(chatter)
    await _send(chatter, cid)
    read = await read_stream(chatter, cid)
    assert read.terminal is not None and read.terminal.event == "turn.failed"
    assert read.terminal.data["partial"] == read.text == "Partial answer so far"
    stored = (await _stored(chatter, cid))[-1]
    assert stored["status"] == "failed"
    assert stored["result"]["value"] == "Partial answer so far"
    assert stored["result"]["error"]["code"] == read.terminal.data["code"]
    # The conversation accepts the next message.
    scripted_provider.script(text("recovered"))
    assert (await _send(chatter, cid, content="again", wait="true"))["assistant_message"]["result"][
        "value"
    ] == "recovered"


async def test_a_client_that_stops_reading_neither_blocks_the_turn_nor_grows_memory(
    sqlite_url: str, make_settings: Any, scripted_provider: ScriptedProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    from backend.app import create_app
    from backend.services.delivery import broker as broker_module
    from tests.support.api import new_user
    from tests.support.servers import serve

    monkeypatch.setattr(broker_module, "QUEUE_LIMIT", 5)
    app = create_app(make_settings(sqlite_url, openai_base_url=scripted_provider.base_url))
    answer = " ".join(f"word{n}" for n in range(300))
    scripted_provider.script(
        tool_call("generate_report", {"rows": 50_000, "seed": 1}),
        tool_call("generate_report", {"rows": 50_000, "seed": 2}),
        text(answer, token_delay=0.002),
    )
    async with serve(app) as base_url:
        client = await new_user(base_url, "sleepy")
        cid = await _conversation(client)
        await _send(client, cid)
        # A client connects and then never reads: megabytes of tool output fill the socket.
        stalled = await client.send(
            client.build_request("GET", f"/api/conversations/{cid}/stream"), stream=True
        )
        for _ in range(600):
            status = (await _stored(client, cid))[-1]["status"]
            if status != "running":
                break
            await asyncio.sleep(0.05)
        assert status == "completed", "the turn must finish while a client is stalled"
        queued = [
            len(sub._queue._queue) for subs in app.state.ctx.broker._subscriptions.values() for sub in subs
        ]
        assert all(size <= 5 for size in queued), queued
        # When it reads again it still gets every event, in order, and the exact text.
        body = (await stalled.aread()).decode()
        await stalled.aclose()
        ids = [line.split(":", 1)[1].strip() for line in body.splitlines() if line.startswith("id:")]
        assert [int(i.split(":")[1]) for i in ids] == list(range(1, len(ids) + 1))
        stored = (await _stored(client, cid))[-1]
        deltas = [
            json.loads(line[5:])["text"]
            for previous, line in zip(body.splitlines(), body.splitlines()[1:], strict=False)
            if previous.strip() == "event: message.delta" and line.startswith("data:")
        ]
        assert "".join(deltas) == stored["result"]["value"] == answer
        await client.aclose()


async def test_pruned_turns_replay_from_the_stored_message(
    chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider, database_url: str
) -> None:
    from datetime import timedelta

    from backend.db import create_engine, session_factory
    from backend.models.base import utcnow
    from backend.services.delivery.streams import prune_finished

    scripted_provider.script(tool_call("generate_report", {"rows": 3}, text="Looking. "), text(ANSWER))
    cid = await _conversation(chatter)
    await _send(chatter, cid, wait="true")
    original = await read_stream(chatter, cid)
    engine = create_engine(database_url)
    async with session_factory(engine)() as db, db.begin():
        assert await prune_finished(db, utcnow() + timedelta(seconds=1)) == 1
    await engine.dispose()

    replay = await read_stream(chatter, cid)
    assert replay.text == original.text
    assert replay.events[-1] == original.events[-1]  # the terminal event keeps its id and data
    assert [e.event for e in replay.events if e.event.startswith("tool.")] == [
        "tool.started",
        "tool.completed",
    ]
    middle = await read_stream(chatter, cid, last_event_id=original.events[3].id)
    assert [e.id for e in middle.events] == [original.events[-1].id]
