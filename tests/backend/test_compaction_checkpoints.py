"""Compaction checkpoints over the whole stack: stored the moment they are made, so a turn that
compacts and then fails or is stopped still leaves the checkpoint the next turn starts from."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from backend.app import create_app
from backend.settings import Settings
from chat_shell.guard.stages.summary_compaction.prompts import SUMMARY_OPENING
from tests.support.api import signed_in
from tests.support.scripted_provider import Reply, ScriptedProvider, http_error, text
from tests.support.servers import serve
from tests.support.sse import read_stream
from tests.support.texts import SMALL_COMPACTION, WORDS


@pytest.fixture
async def client(
    database_url: str, chat_settings: Callable[..., Settings]
) -> AsyncIterator[httpx.AsyncClient]:
    settings = chat_settings(
        database_url,
        **SMALL_COMPACTION,
        compaction_heartbeat_seconds=0.2,
        # These tests are about compactions inside a turn (test_compaction_ahead covers the rest).
        compaction_ahead=False,
    )
    async with serve(create_app(settings)) as base_url, signed_in(base_url, "compactor") as user:
        yield user


class Script:
    """The provider's behaviour per phase: normal replies until a summary is requested, then
    `after_summary` for the rest of that turn."""

    def __init__(self, provider: ScriptedProvider, after_summary: Reply) -> None:
        self.compacted = False
        self.answered_after_summary = False
        self.after_summary = after_summary
        provider.default_reply = self.reply  # type: ignore[method-assign]
        provider.default_summary = self.summary  # type: ignore[method-assign]

    def summary(self, body: dict[str, Any]) -> Reply:
        self.compacted = True
        return text("Budget 8000 EUR; order ORD-48213.")

    def reply(self, body: dict[str, Any]) -> Reply:
        if not self.compacted:
            return text("Noted.")
        self.answered_after_summary = True
        return self.after_summary


async def _history(client: httpx.AsyncClient, cid: int) -> dict[str, Any]:
    response = await client.get(
        f"/api/conversations/{cid}/history", params={"from_latest_compaction": "true"}
    )
    assert response.status_code == 200, response.text
    return response.json()


async def _next_turn_starts_from_the_checkpoint(
    client: httpx.AsyncClient, provider: ScriptedProvider, script: Script, cid: int, checkpoint: int
) -> None:
    history = await _history(client, cid)
    assert history["checkpoint_message_id"] == checkpoint
    assert history["messages"][0]["metadata"]["summary_compacted"] is True
    script.compacted, script.after_summary = False, text("unused")
    summaries = len(provider.summary_requests)
    response = await client.post(
        f"/api/conversations/{cid}/messages", json={"content": "And now?"}, params={"wait": "true"}
    )
    assert response.json()["assistant_message"]["status"] == "completed"
    assert len(provider.summary_requests) == summaries  # no re-summarizing
    sent = provider.chat_requests[-1]["messages"]
    assert sent[0]["content"].startswith(SUMMARY_OPENING) and "ORD-48213" in sent[0]["content"]
    assert sent[-1]["content"] == "And now?"


async def _send_until(client: httpx.AsyncClient, cid: int, script: Script, **params: str) -> dict[str, Any]:
    for turn in range(12):
        response = await client.post(
            f"/api/conversations/{cid}/messages",
            json={"content": f"Turn {turn}: " + WORDS * 80},
            params=params,
        )
        assert response.status_code in (200, 202), response.text
        body = response.json()
        if params.get("wait") != "true":
            return body
        if script.compacted:
            return body
    raise AssertionError("no compaction happened")


async def test_a_turn_that_compacts_then_fails_leaves_the_checkpoint(
    client: httpx.AsyncClient, scripted_provider: ScriptedProvider
) -> None:
    script = Script(scripted_provider, after_summary=http_error(500))
    cid = (await client.post("/api/conversations", json={"title": "fails"})).json()["id"]
    body = await _send_until(client, cid, script, wait="true")
    failed = body["assistant_message"]
    assert failed["status"] == "failed"
    records = failed["result"]["context_compactions"]
    assert [r["status"] for r in records if r["strategy"] == "summary_compact"] == ["completed"]
    await _next_turn_starts_from_the_checkpoint(client, scripted_provider, script, cid, failed["message_id"])


async def test_a_turn_that_compacts_then_is_stopped_leaves_the_checkpoint(
    client: httpx.AsyncClient, scripted_provider: ScriptedProvider
) -> None:
    script = Script(scripted_provider, after_summary=text("", hang=True))
    cid = (await client.post("/api/conversations", json={"title": "stopped"})).json()["id"]
    for _ in range(12):
        started = await _send_until(client, cid, script)
        while not script.answered_after_summary:
            await asyncio.sleep(0.05)
            reply = (await client.get(f"/api/conversations/{cid}/messages")).json()["items"][-1]
            if reply["status"] != "running":
                break
        if script.answered_after_summary:
            break
    else:
        raise AssertionError("no compaction happened")
    # The reply hangs after the compaction: the user stops it.
    stop = await client.post(f"/api/conversations/{cid}/stop")
    assert stop.status_code == 202
    rest = await read_stream(client, cid)
    assert rest.terminal is not None and rest.terminal.event == "turn.cancelled"
    message_id = started["assistant_message"]["message_id"]
    await _next_turn_starts_from_the_checkpoint(client, scripted_provider, script, cid, message_id)
