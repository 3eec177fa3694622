"""The real embedded local model through the whole stack over HTTP: a fresh install (no
provider, no key) chats with the default model, streams, stores the reply and reports usage;
SmolLM2 (fast) takes text parts and compacts a conversation pushed over its window with a
real summary. The deep run adds the runtime under emulation of an AVX2-only CPU (Haswell)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from langchain_core.messages import HumanMessage

from backend.app import create_app
from backend.local_model.launch import DEFAULT_COMMAND, ServerOptions
from backend.local_model.model_file import catalog_path, default_cache_dir
from backend.local_model.supervisor import LocalModelServer
from backend.settings import Settings
from chat_shell.providers.openai import ProviderConfig, create_chat_model
from chat_shell.providers.profiles import LOCAL_MODEL_NAME, SMOLLM2_MODEL_NAME, resolve_profile
from chat_shell.titles import MAX_TITLE_CHARS
from tests.conftest import DEEP
from tests.support.api import new_user
from tests.support.local_model import (
    local_model_ready,
    local_settings,
    new_conversation,
    require_local_model,
    send,
    smollm2_settings,
)
from tests.support.servers import serve
from tests.support.sse import read_stream

pytestmark = pytest.mark.local_model

CITIES = ("Kyoto", "Lisbon", "Quito", "Oslo", "Hanoi", "Dakar", "Perth", "Tbilisi")


async def test_a_fresh_install_chats_with_the_default_model(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    require_local_model("qwen2.5-coder-1.5b")
    app = create_app(local_settings(make_settings, sqlite_url, max_output_tokens=24))
    async with serve(app) as base_url:
        server = await local_model_ready(app)
        client = await new_user(base_url, "local")
        # As the page creates a chat: its first line, until the model names it.
        question = "What is the capital of France? Answer with one word."
        made = await client.post("/api/conversations", json={"title": question, "generate_title": True})
        cid = made.json()["id"]
        # A question the default model answers with the runtime's tool offered (5 of 5 sampled
        # tries; an arithmetic question tempts it into an invented tool call now and then).
        started = await send(client, cid, question, wait=False)
        stream = await read_stream(client, cid, turn_id=started["turn_id"])
        stored = (await client.get(f"/api/conversations/{cid}/messages")).json()["items"]
        context = (await client.get(f"/api/conversations/{cid}/context")).json()
        ready = (await client.get("/readyz")).json()
        # The runtime's other calls answer through the local-model wrapper too.
        panel = await client.get(f"/api/conversations/{cid}/mcp-servers")
        titles = app.state.ctx.host.titles
        await asyncio.wait_for(titles.settled(), 120)
        named = (await client.get(f"/api/conversations/{cid}")).json()
        await client.aclose()

    assert server.base_url.startswith("http://127.0.0.1:")
    assert ready["local_model"]["state"] == "ready" and ready["local_model"]["model"] == LOCAL_MODEL_NAME
    assert stream.terminal is not None and stream.terminal.event == "turn.completed", stream.events
    assert [e for e in stream.events if e.event == "message.delta"], "the reply was not streamed"
    assert "paris" in stream.text.lower(), stream.text
    assert [(m["role"], m["status"]) for m in stored] == [("user", "completed"), ("assistant", "completed")]
    assert stored[1]["result"]["value"] == stream.text
    assert context["model"] == LOCAL_MODEL_NAME
    metrics = context["metrics"]
    assert metrics["context_window"] == 4096
    # llama.cpp's server streams usage: calibration follows its counts.
    assert metrics["calibration"]["provider_reports_usage"] is True
    log = (server.options.log_path).read_text()
    assert "AMX" not in log, "the runtime must not use llama.cpp's AMX backend"
    assert panel.status_code == 200, panel.text
    assert named["title_source"] == "generated", named
    assert 0 < len(named["title"]) <= MAX_TITLE_CHARS and "\n" not in named["title"]


async def test_the_local_model_takes_content_given_as_text_parts(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    """The summarizer sends its transcript as text parts."""
    app = create_app(smollm2_settings(make_settings, sqlite_url))
    async with serve(app):
        server = await local_model_ready(app)
        profile = resolve_profile(SMOLLM2_MODEL_NAME, max_output_tokens=16)
        model = create_chat_model(profile, ProviderConfig(base_url=server.base_url))
        parts = [{"type": "text", "text": "Say hello"}, {"type": "text", "text": " in one word."}]
        reply = await model.ainvoke([HumanMessage(content=parts)])  # type: ignore[arg-type]
    assert reply.text.strip()


def _paragraph(turn: int) -> str:
    city = CITIES[turn % len(CITIES)]
    sentences = [
        f"Day {turn}, entry {i}: in {city} the market opened at {6 + i % 4} o'clock, "
        f"a ferry carried {40 + 7 * i} passengers and the museum showed {3 + i} new maps."
        for i in range(18)
    ]
    return "Keep this travel log in mind. " + " ".join(sentences) + " Reply with one word: noted."


async def _push_over_the_window(client: httpx.AsyncClient, turns: int) -> tuple[int, dict]:
    cid = await new_conversation(client)
    for turn in range(turns):
        started = await send(client, cid, _paragraph(turn), wait=False)
        stream = await read_stream(client, cid, turn_id=started["turn_id"])
        assert stream.terminal is not None and stream.terminal.event == "turn.completed", stream.events
        compactions = [
            e.data
            for e in stream.events
            if e.event == "context.compaction" and e.data["status"] == "completed"
        ]
        if compactions:
            return cid, compactions[-1]
    raise AssertionError("the conversation never triggered a compaction")


@pytest.mark.timeout(900)
async def test_a_conversation_over_the_window_is_summarized_by_the_local_model(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    # A 2048-token window (the server's too) halves the turns and the summary's input: the
    # summarizer's path is the same, at half the default suite's time.
    settings = smollm2_settings(
        make_settings,
        sqlite_url,
        context_window=2048,
        max_output_tokens=16,
        summary_max_tokens=120,
        summary_timeout_seconds=600,
        provider_timeout_seconds=600,
        # The summary inside a turn (ahead of time, tests/backend/test_compaction_ahead.py).
        compaction_ahead=False,
    )
    app = create_app(settings)
    async with serve(app) as base_url:
        await local_model_ready(app)
        client = await new_user(base_url, "compact")
        cid, record = await _push_over_the_window(client, turns=12)
        history = (await client.get(f"/api/conversations/{cid}/history")).json()
        after = await send(client, cid, "Which city did the log mention first? One word.")
        await client.aclose()

    assert record["strategy"] == "summary_compact"
    assert record["summary_text"].strip()
    assert record["after_tokens"] < record["before_tokens"]
    assert history.get("checkpoint_message_id") is not None
    assert after["assistant_message"]["status"] == "completed"
    assert after["assistant_message"]["result"]["value"].strip()


@pytest.mark.deep
@pytest.mark.skipif(not DEEP, reason="CHAT_SHELL_DEEP=1 runs it (about a minute)")
@pytest.mark.timeout(900)
async def test_the_runtime_answers_under_emulation_of_an_avx2_only_cpu(tmp_path: Path) -> None:
    """Debian's qemu-user emulating a Haswell (AVX2, no AVX-512, no AMX) runs the server and
    its verifying decode, as `CHAT_SHELL_LOCAL_MODEL_SERVER` would (docs/local-model.md)."""
    model = require_local_model()
    qemu = shutil.which("qemu-x86_64")
    if qemu is None:
        pytest.fail("qemu-user is not installed: `apt-get install -y qemu-user` (scripts/test.sh does it)")
    options = ServerOptions(
        model_file=catalog_path(model, default_cache_dir()),
        model_id=model.profile,
        log_path=tmp_path / "emulated.log",
        command=(qemu, "-cpu", "Haswell", *DEFAULT_COMMAND),
        startup_timeout_seconds=600,
    )
    server = LocalModelServer(options)
    server.start()
    try:
        status = await server.settled()
    finally:
        await server.stop()
    assert status.state == "ready", (status, server.log_tail())
