"""The real embedded local model through the whole stack over HTTP: a fresh install (no
provider, no key) chats, streams, stores the reply, and compacts a conversation pushed over
the 4096-token window with a real summary."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from fastapi import FastAPI
from langchain_core.messages import HumanMessage

from backend.app import create_app
from backend.settings import Settings
from chat_shell.providers.openai import ProviderConfig, create_chat_model
from chat_shell.providers.profiles import LOCAL_MODEL_NAME, resolve_profile
from tests.support.api import new_user
from tests.support.local_model import local_settings, new_conversation, require_local_model, send
from tests.support.servers import serve
from tests.support.sse import read_stream

pytestmark = pytest.mark.local_model

CITIES = ("Kyoto", "Lisbon", "Quito", "Oslo", "Hanoi", "Dakar", "Perth", "Tbilisi")


@pytest.fixture
async def local_app(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    require_local_model()
    # A short output budget keeps each real generation to a few seconds on two cores.
    app = create_app(local_settings(make_settings, sqlite_url, max_output_tokens=48))
    async with serve(app) as base_url:
        client = await new_user(base_url, "local")
        yield app, client
        await client.aclose()


async def test_a_fresh_install_chats_with_the_local_model(
    local_app: tuple[FastAPI, httpx.AsyncClient],
) -> None:
    app, client = local_app
    assert app.state.local_model.base_url.startswith("http://127.0.0.1:")
    cid = await new_conversation(client)
    started = await send(client, cid, "Name one color of the sky. Answer in one short sentence.", wait=False)

    stream = await read_stream(client, cid, turn_id=started["turn_id"])

    assert stream.terminal is not None and stream.terminal.event == "turn.completed", stream.events
    assert [e for e in stream.events if e.event == "message.delta"], "the reply was not streamed"
    assert stream.text.strip()
    stored = (await client.get(f"/api/conversations/{cid}/messages")).json()["items"]
    assert [(m["role"], m["status"]) for m in stored] == [("user", "completed"), ("assistant", "completed")]
    assert stored[1]["result"]["value"] == stream.text
    context = (await client.get(f"/api/conversations/{cid}/context")).json()
    assert context["model"] == LOCAL_MODEL_NAME
    metrics = context["metrics"]
    assert metrics["context_window"] == 4096
    # llama.cpp streams no usage: calibration runs on local counts, and the metrics say so.
    assert metrics["calibration"]["provider_reports_usage"] is False
    assert metrics["estimate_source"] == "configured"


async def test_the_local_model_takes_content_given_as_text_parts(
    local_app: tuple[FastAPI, httpx.AsyncClient],
) -> None:
    """The summarizer sends its transcript as text parts; llama.cpp's chat template takes strings."""
    app, _ = local_app
    profile = resolve_profile(LOCAL_MODEL_NAME, max_output_tokens=16)
    model = create_chat_model(profile, ProviderConfig(base_url=app.state.local_model.base_url))
    parts = [{"type": "text", "text": "Say hello"}, {"type": "text", "text": " in one word."}]

    reply = await model.ainvoke([HumanMessage(content=parts)])  # type: ignore[arg-type]

    assert reply.text.strip()


def _paragraph(turn: int) -> str:
    city = CITIES[turn % len(CITIES)]
    sentences = [
        f"Day {turn}, entry {i}: in {city} the market opened at {6 + i % 4} o'clock, "
        f"a ferry carried {40 + 7 * i} passengers and the museum showed {3 + i} new maps."
        for i in range(24)
    ]
    return "Keep this travel log in mind. " + " ".join(sentences) + " Reply with one word: noted."


@pytest.mark.timeout(900)
async def test_a_conversation_over_the_window_is_summarized_by_the_local_model(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    require_local_model()
    # The summary reads ~3k tokens of prompt: about 40 s on one busy core. A short summary cap
    # keeps its generation short too.
    settings = local_settings(
        make_settings,
        sqlite_url,
        max_output_tokens=48,
        summary_max_tokens=120,
        summary_timeout_seconds=600,
        provider_timeout_seconds=600,
    )
    async with serve(create_app(settings)) as base_url:
        client = await new_user(base_url, "compact")
        try:
            await _push_over_the_window(client)
        finally:
            await client.aclose()


async def _push_over_the_window(client: httpx.AsyncClient) -> None:
    cid = await new_conversation(client)
    compactions: list[dict] = []
    for turn in range(12):
        started = await send(client, cid, _paragraph(turn), wait=False)
        stream = await read_stream(client, cid, turn_id=started["turn_id"])
        assert stream.terminal is not None and stream.terminal.event == "turn.completed", stream.events
        compactions = [
            e.data
            for e in stream.events
            if e.event == "context.compaction" and e.data["status"] == "completed"
        ]
        if compactions:
            break
    assert compactions, "the conversation never triggered a compaction"
    record = compactions[-1]
    assert record["strategy"] == "summary_compact"
    assert record["summary_text"].strip()
    assert record["after_tokens"] < record["before_tokens"]
    history = (await client.get(f"/api/conversations/{cid}/history")).json()
    assert history.get("checkpoint_message_id") is not None

    after = await send(client, cid, "Which city did the log mention first? One word.")

    assert after["assistant_message"]["status"] == "completed"
    assert after["assistant_message"]["result"]["value"].strip()
