"""Compaction ahead of time over the whole stack (issue 20): after the turn that crosses the
pre-trigger the backend compacts in the background, so the next turn sends the checkpoint and
calls no summarizer; a send during the job waits for it; a failed job leaves the inline path."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select
from sqlalchemy import text as sql

from backend.app import create_app
from backend.models import CompactionEvent, Message
from backend.secret_policy import new_secret
from backend.services.compaction.ahead import AheadCompactions
from backend.services.delivery import job_queue
from backend.settings import Settings
from chat_shell.guard.stages.summary_compaction.prompts import SUMMARY_OPENING
from tests.support.api import new_operator, new_user, signed_in
from tests.support.processes import BackendProcess, backend_env
from tests.support.scripted_provider import Reply, ScriptedProvider, http_error, text
from tests.support.servers import serve
from tests.support.sse import read_stream
from tests.support.telemetry import Recorded
from tests.support.texts import SMALL_COMPACTION, WORDS

SUMMARY = "Budget 8000 EUR; order ORD-48213."
# Trigger 3,000 and pre-trigger 2,100 (0.7 x trigger): each turn below adds about 450 tokens.
SIZES = {**SMALL_COMPACTION, "compaction_heartbeat_seconds": 0.2}


class Summaries:
    """The summarizer's side of the provider: counts calls, optionally slow or failing."""

    def __init__(self, provider: ScriptedProvider, reply: Reply | None = None) -> None:
        self.called = asyncio.Event()
        self.reply = reply or text(SUMMARY)
        provider.default_summary = self.answer  # type: ignore[method-assign]

    def answer(self, body: dict[str, Any]) -> Reply:
        self.called.set()
        return self.reply


@dataclass
class Backend:
    app: FastAPI
    client: httpx.AsyncClient
    database_url: str
    summaries: Summaries

    @property
    def on_queue(self) -> bool:
        return self.app.state.ctx.settings.turns_on_queue

    async def ahead_running(self, cid: int) -> bool:
        """Whether a job compacts the conversation ahead of time: a task of this process
        (SQLite), or a job of the queue waiting or running (PostgreSQL)."""
        ahead = self.app.state.ctx.host.ahead
        if isinstance(ahead, AheadCompactions):
            return ahead.running(cid)
        async with self.app.state.ctx.sessions() as db:
            jobs = await db.scalar(
                sql(
                    "SELECT count(*) FROM procrastinate_jobs WHERE task_name = :task AND lock = :lock"
                    " AND status IN ('todo', 'doing')"
                ),
                {"task": job_queue.COMPACT_AHEAD, "lock": job_queue.conversation_lock(cid)},
            )
        return bool(jobs)

    async def settled(self, cid: int) -> None:
        """Waits until no job compacts the conversation ahead of time."""
        deadline = asyncio.get_running_loop().time() + 20
        while await self.ahead_running(cid):
            assert asyncio.get_running_loop().time() < deadline, "timed out"
            await asyncio.sleep(0.02)

    async def rows(self, cid: int) -> list[tuple[str, str, int | None]]:
        async with self.app.state.ctx.sessions() as db:
            found = await db.execute(
                select(CompactionEvent.strategy, CompactionEvent.status, CompactionEvent.assistant_message_pk)
                .where(CompactionEvent.conversation_id == cid)
                .order_by(CompactionEvent.id)
            )
            return [tuple(row) for row in found]  # type: ignore[misc]

    async def message_pk(self, cid: int, message_id: int) -> int:
        async with self.app.state.ctx.sessions() as db:
            pk = await db.scalar(
                select(Message.id).where(Message.conversation_id == cid, Message.message_id == message_id)
            )
            assert pk is not None
            return pk


def _backend_fixture(**extra: object) -> Any:
    @pytest.fixture
    async def backend(
        database_url: str, chat_settings: Callable[..., Settings], scripted_provider: ScriptedProvider
    ) -> AsyncIterator[Backend]:
        settings = chat_settings(database_url, **SIZES, **extra)
        app = create_app(settings)
        async with serve(app) as base_url, signed_in(base_url, "ahead") as client:
            yield Backend(app, client, database_url, Summaries(scripted_provider))

    return backend


backend = _backend_fixture()
SCRAPE_TOKEN = new_secret()
observed_backend = _backend_fixture(telemetry_enabled=True, metrics_token=SCRAPE_TOKEN)
# A pre-trigger just under the trigger: the turn after a failed job crosses the trigger itself.
late_backend = _backend_fixture(compaction_pre_trigger_tokens=2_500)


async def send(client: httpx.AsyncClient, cid: int, content: str, *, wait: bool = True) -> dict[str, Any]:
    response = await client.post(
        f"/api/conversations/{cid}/messages",
        json={"content": content},
        params={"wait": "true"} if wait else {},
    )
    assert response.status_code in (200, 202), response.text
    return response.json()


async def history(client: httpx.AsyncClient, cid: int) -> dict[str, Any]:
    response = await client.get(
        f"/api/conversations/{cid}/history", params={"from_latest_compaction": "true"}
    )
    assert response.status_code == 200, response.text
    return response.json()


async def until_ahead(backend: Backend, title: str, reply: Reply | None = None) -> tuple[int, int]:
    """A new conversation, and turns in it until one ends at or above the pre-trigger and its job
    calls the summarizer (answering `reply`, if given): the conversation's id and that turn's
    assistant message id."""
    summaries = backend.summaries
    if reply is not None:
        summaries.reply = reply
    cid = int((await backend.client.post("/api/conversations", json={"title": title})).json()["id"])
    for turn in range(12):
        body = await send(backend.client, cid, f"Turn {turn}: " + WORDS * 40)
        assert not body["assistant_message"]["result"].get("context_compactions"), "compacted inline"
        deadline = asyncio.get_running_loop().time() + 20
        while not summaries.called.is_set() and await backend.ahead_running(cid):
            assert asyncio.get_running_loop().time() < deadline, "timed out"
            await asyncio.sleep(0.02)
        if summaries.called.is_set():
            return cid, int(body["assistant_message"]["message_id"])
    raise AssertionError("the conversation never crossed the pre-trigger")


async def test_the_turn_after_the_pre_trigger_sends_the_checkpoint_and_calls_no_summarizer(
    backend: Backend, scripted_provider: ScriptedProvider
) -> None:
    client = backend.client
    cid, crossing = await until_ahead(backend, "ahead")
    await backend.settled(cid)
    # The checkpoint is on the crossing turn's assistant message, before any further send.
    found = await history(client, cid)
    assert found["checkpoint_message_id"] == crossing
    assert found["messages"][0]["metadata"]["summary_compacted"] is True
    pk = await backend.message_pk(cid, crossing)
    assert await backend.rows(cid) == [("summary_ahead", "completed", pk)]
    messages = (await client.get(f"/api/conversations/{cid}/messages")).json()["items"]
    (record,) = messages[-1]["result"]["context_compactions"]
    assert record["strategy"] == "summary_ahead" and record["checkpoint_message_id"] == crossing
    # The next turn: no summarizer call, the summary sent, the new message last.
    summaries_before = len(scripted_provider.summary_requests)
    body = await send(client, cid, "And now?")
    assert body["assistant_message"]["status"] == "completed"
    assert not body["assistant_message"]["result"].get("context_compactions")
    assert len(scripted_provider.summary_requests) == summaries_before
    sent = scripted_provider.chat_requests[-1]["messages"]
    assert sent[0]["content"].startswith(SUMMARY_OPENING) and "ORD-48213" in sent[0]["content"]
    assert sent[-1]["content"] == "And now?"


async def test_a_send_the_instant_a_turn_ends_goes_after_the_compaction_that_turn_queued(
    backend: Backend, scripted_provider: ScriptedProvider
) -> None:
    """Each send follows the previous reply's ending at once, as a quick user's would: the one
    after the crossing turn still reaches the model from the new checkpoint (the job was queued
    before the ending was shown, so it cannot slip in behind the send)."""
    client = backend.client
    backend.summaries.reply = text(SUMMARY, first_token_delay=0.5)  # still running when looked for
    cid = int((await client.post("/api/conversations", json={"title": "instant"})).json()["id"])
    queued_at_the_ending: dict[int, bool] = {}
    for turn in range(12):
        body = await send(client, cid, f"Turn {turn}: " + WORDS * 40)
        reply = body["assistant_message"]
        queued_at_the_ending[reply["message_id"]] = await backend.ahead_running(cid)
        assert not reply["result"].get("context_compactions"), "compacted inline"
        if backend.summaries.called.is_set():
            break
    await send(client, cid, "Right after.")
    await backend.settled(cid)
    crossing = (await history(client, cid))["checkpoint_message_id"]
    assert crossing is not None
    assert queued_at_the_ending[crossing], "the ending was shown before its compaction was queued"
    messages = (await client.get(f"/api/conversations/{cid}/messages")).json()["items"]
    ids = [m["message_id"] for m in messages]
    following = messages[ids.index(crossing) + 1]["content"]
    (request,) = [r for r in scripted_provider.chat_requests if r["messages"][-1]["content"] == following]
    assert request["messages"][0]["content"].startswith(SUMMARY_OPENING)
    assert [row[:2] for row in await backend.rows(cid)] == [("summary_ahead", "completed")]


async def test_operators_see_ahead_as_its_own_strategy_on_the_dashboard_and_in_prometheus(
    telemetry: Recorded, observed_backend: Backend
) -> None:
    backend, client = observed_backend, observed_backend.client
    cid, _ = await until_ahead(backend, "observed")
    await backend.settled(cid)
    operator = await new_operator(str(client.base_url), backend.database_url, "operator")
    try:
        summary = (await operator.get("/api/metrics/summary", params={"window": "1h"})).json()
        strategies = {s["strategy"]: s for s in summary["compactions_by_strategy"]}
        assert (strategies["summary_ahead"]["count"], strategies["summary_ahead"]["completed"]) == (1, 1)
        assert "summary_compact" not in strategies
        scraped = await operator.get("/metrics", headers={"Authorization": f"Bearer {SCRAPE_TOKEN}"})
    finally:
        await operator.aclose()
    counted = {
        sample.labels.get("strategy"): sample.value
        for family in text_string_to_metric_families(scraped.text)
        for sample in family.samples
        if sample.name == "chat_shell_compactions_total" and sample.labels.get("status") == "completed"
    }
    assert counted.get("summary_ahead", 0) >= 1


async def test_a_send_during_the_background_compaction_waits_for_it_and_uses_it(
    backend: Backend, scripted_provider: ScriptedProvider
) -> None:
    client = backend.client
    cid, crossing = await until_ahead(backend, "waits", text(SUMMARY, first_token_delay=1.5))
    assert await backend.ahead_running(cid)
    await send(client, cid, "Still there?", wait=False)
    stream = await read_stream(client, cid)
    names = [(event.event, event.data.get("status")) for event in stream.events]
    assert stream.terminal is not None and stream.terminal.event == "turn.completed"
    if not backend.on_queue:
        # The meter's "compacting" statuses and heartbeats, then the outcome, then the turn.
        assert names[0] in {("context.compaction", "started"), ("context.compaction", "in_progress")}
        assert ("context.compaction", "in_progress") in names
        assert names.index(("context.compaction", "completed")) < names.index(("turn.started", None))
    # On the queue the turn waited for the job behind the conversation's lock: it made none.
    assert ("context.compaction", "completed") not in names[names.index(("turn.started", None)) :]
    # One compaction only (the job's; the turn made none), and the turn sent its checkpoint.
    assert not stream.terminal.data["message"]["result"].get("context_compactions")
    sent = scripted_provider.chat_requests[-1]["messages"]
    assert sent[0]["content"].startswith(SUMMARY_OPENING) and sent[-1]["content"] == "Still there?"
    assert (await history(client, cid))["checkpoint_message_id"] == crossing
    assert [row[:2] for row in await backend.rows(cid)] == [("summary_ahead", "completed")]


async def test_a_failed_background_summary_leaves_the_inline_path(late_backend: Backend) -> None:
    client = late_backend.client
    cid, _ = await until_ahead(late_backend, "fails", http_error(500))
    await late_backend.settled(cid)
    assert (await history(client, cid)).get("checkpoint_message_id") is None
    late_backend.summaries.reply = text(SUMMARY)
    body = await send(client, cid, "Next: " + WORDS * 40)
    records = body["assistant_message"]["result"]["context_compactions"]
    assert [(r["strategy"], r["status"]) for r in records] == [("summary_compact", "completed")]
    assert (await history(client, cid))["checkpoint_message_id"] == body["assistant_message"]["message_id"]
    rows = await late_backend.rows(cid)
    assert [row[:2] for row in rows[:2]] == [("summary_ahead", "fallback"), ("summary_compact", "completed")]


async def test_a_conversation_deleted_during_the_job_gets_nothing_stored(backend: Backend) -> None:
    client = backend.client
    cid, crossing = await until_ahead(backend, "deleted", text(SUMMARY, first_token_delay=1.0))
    assert (await client.delete(f"/api/conversations/{cid}")).status_code == 204
    await backend.settled(cid)
    assert await backend.rows(cid) == []
    async with backend.app.state.ctx.sessions() as db:
        message = await db.get(Message, await backend.message_pk(cid, crossing))
        assert message is not None and not message.has_checkpoint


async def test_kill_9_during_a_background_compaction_leaves_no_half_checkpoint(
    database_url: str, tmp_path: Path, scripted_provider: ScriptedProvider
) -> None:
    sizes = {f"CHAT_SHELL_{key.upper()}": str(value) for key, value in SIZES.items()}
    env = backend_env(database_url, tmp_path / "data", scripted_provider.base_url, **sizes)
    # A generous start-up time: two processes start on a busy machine.
    first = await asyncio.to_thread(BackendProcess(env, tmp_path / "first.log").start, 180)
    client = await new_user(first.base_url, "crash")
    summaries = Summaries(scripted_provider, text("", hang=True))
    try:
        cid = (await client.post("/api/conversations", json={"title": "crash"})).json()["id"]
        for turn in range(12):
            await send(client, cid, f"Turn {turn}: " + WORDS * 40)
            try:
                await asyncio.wait_for(summaries.called.wait(), timeout=1.0)
                break
            except TimeoutError:
                continue
        assert summaries.called.is_set(), "the conversation never crossed the pre-trigger"
        first.kill()
        summaries.reply = text(SUMMARY)
        second = await asyncio.to_thread(BackendProcess(env, tmp_path / "second.log").start, 180)
        client.base_url = httpx.URL(second.base_url)
        try:
            assert (await history(client, cid)).get("checkpoint_message_id") is None
            messages = (await client.get(f"/api/conversations/{cid}/messages")).json()["items"]
            assert all(not (m["result"] or {}).get("context_compactions") for m in messages)
            # The next turn works, and the conversation gets its checkpoint (inline or ahead).
            body = await send(client, cid, "After the restart: " + WORDS * 40)
            assert body["assistant_message"]["status"] == "completed"
            sent = scripted_provider.chat_requests[-1]["messages"]
            assert sent[-1]["content"].startswith("After the restart: ")
            deadline = asyncio.get_running_loop().time() + 20
            while (await history(client, cid)).get("checkpoint_message_id") is None:
                assert asyncio.get_running_loop().time() < deadline, "no checkpoint after the restart"
                await asyncio.sleep(0.1)
        finally:
            second.stop()
    finally:
        first.stop()
        await client.aclose()


async def test_stopping_a_turn_that_waits_ends_it_and_leaves_the_job_running(backend: Backend) -> None:
    client = backend.client
    cid, crossing = await until_ahead(backend, "stopped", text(SUMMARY, first_token_delay=2.0))
    await send(client, cid, "Never mind.", wait=False)
    assert (await client.post(f"/api/conversations/{cid}/stop")).status_code == 202
    stream = await read_stream(client, cid)
    assert stream.terminal is not None and stream.terminal.event == "turn.cancelled"
    assert await backend.ahead_running(cid)  # the stop did not wait for the summary
    await backend.settled(cid)
    assert (await history(client, cid))["checkpoint_message_id"] == crossing
