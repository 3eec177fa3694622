"""The event contract, identical in package mode (in-process) and service mode (HTTP + SSE)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from chat_shell.api.app import create_service_app
from chat_shell.contracts import TextBlock, ToolBlock, TurnEvent, TurnRuntime
from chat_shell.runtime import ChatShell
from chat_shell.service_client import RemoteChatShell
from tests.chat_shell.conftest import MakeShell
from tests.support.scripted_provider import (
    Reply,
    ScriptedProvider,
    ScriptedToolCall,
    http_error,
    text,
)
from tests.support.servers import free_port, serve
from tests.support.tcp_proxy import tcp_proxy
from tests.support.turns import collect, deltas, make_request

SERVICE_TOKEN = "service-secret"


@dataclass
class Placement:
    mode: str
    runner: TurnRuntime
    shell: ChatShell


@pytest.fixture
def provider_timeout() -> float:
    """Generous, so a busy machine never turns a scripted reply into a timeout; the test that
    wants a timeout parametrizes it down."""
    return 10.0


@pytest.fixture(params=["package", "service"])
async def placement(
    request: pytest.FixtureRequest, make_shell: MakeShell, provider_timeout: float
) -> AsyncIterator[Placement]:
    shell = make_shell(timeout=provider_timeout)
    if request.param == "package":
        yield Placement("package", shell, shell)
    else:
        async with serve(create_service_app(shell, service_token=SERVICE_TOKEN)) as url:
            remote = RemoteChatShell(url, token=SERVICE_TOKEN)
            yield Placement("service", remote, shell)
            await remote.aclose()
    assert await shell.checkpoint_count() == 0


def _normalized(events: list[TurnEvent]) -> list[dict[str, Any]]:
    """Events without what differs between runs (message ids, timings)."""
    normalized = []
    for event in events:
        data = event.model_dump(mode="json")
        result = data.get("result")
        if result:
            result["ttft_ms"] = None
            for entry in result["messages_chain"]:
                entry["id"] = None
            for request in result.get("requests", []):
                for entry in request["entries"]:
                    entry["message_id"] = None
        normalized.append(data)
    return normalized


def _tool_loop_script() -> list[Reply]:
    return [
        Reply(
            text="Let me check.",
            tool_calls=[ScriptedToolCall(id="call_a", name="generate_report", args={"rows": 2, "seed": 3})],
        ),
        Reply(tool_calls=[ScriptedToolCall(id="call_b", name="generate_report", raw_arguments="{2,, x}")]),
        text("Two orders, 3 units each."),
    ]


async def test_a_tool_loop_streams_the_same_contract(
    scripted_provider: ScriptedProvider, placement: Placement
) -> None:
    scripted_provider.script(*_tool_loop_script())
    events = await collect(placement.runner, make_request(1, "orders?"))
    types = [e.type for e in events]
    assert "context.metrics" in types  # the guard reports pressure before the first model call
    flow = [t for t in types if not t.startswith("context.")]
    collapsed = [t for i, t in enumerate(flow) if i == 0 or t != flow[i - 1]]
    assert collapsed == [
        "turn.started",
        "message.delta",
        "tool.started",
        "tool.completed",
        "tool.started",
        "tool.completed",
        "message.delta",
        "turn.completed",
    ]
    result = events[-1].result  # type: ignore[union-attr]
    # What streamed is what is stored: the paragraph between the rounds is part of a delta.
    assert deltas(events) == result.value == "Let me check.\n\nTwo orders, 3 units each."
    assert [b.type for b in result.blocks] == ["text", "tool", "tool", "text"]
    assert result.blocks[2].status == "error"
    assert [e.role for e in result.messages_chain] == ["assistant", "tool", "assistant", "tool", "assistant"]


async def test_a_provider_failure_keeps_the_partial_text(
    scripted_provider: ScriptedProvider, placement: Placement
) -> None:
    scripted_provider.script(Reply(text="Half of it", stream_fault="error_event"))
    events = await collect(placement.runner, make_request())
    failed = events[-1]
    assert failed.type == "turn.failed" and failed.code == "provider_stream_error"  # type: ignore[union-attr]
    assert failed.partial == "Half of it" == deltas(events)  # type: ignore[union-attr]


@pytest.mark.parametrize("provider_timeout", [0.5])
async def test_a_timeout_is_reported_with_its_code(
    scripted_provider: ScriptedProvider, placement: Placement
) -> None:
    scripted_provider.script(Reply(hang=True))
    events = await collect(placement.runner, make_request())
    assert events[-1].type == "turn.failed" and events[-1].code == "provider_timeout"  # type: ignore[union-attr]


async def test_cancel_reaches_the_runtime_and_the_partial_text_comes_back(
    scripted_provider: ScriptedProvider, placement: Placement
) -> None:
    scripted_provider.script(text("one two three four five six seven eight nine ten", token_delay=0.1))
    cancel = asyncio.Event()
    events: list[TurnEvent] = []
    async for event in placement.runner.run(make_request(), cancel):
        events.append(event)
        if event.type == "message.delta":
            cancel.set()
    cancelled = events[-1]
    assert cancelled.type == "turn.cancelled"
    assert cancelled.partial == deltas(events) and 0 < len(cancelled.partial) < 20  # type: ignore[union-attr]
    assert len(scripted_provider.requests) == 1


async def test_both_placements_produce_the_same_events(
    scripted_provider: ScriptedProvider, make_shell: MakeShell
) -> None:
    shell = make_shell()
    runs: dict[str, list[dict[str, Any]]] = {}
    async with serve(create_service_app(shell)) as url:
        remote = RemoteChatShell(url)
        for mode, runner in (("package", shell), ("service", remote)):
            scripted_provider.script(*_tool_loop_script(), http_error(500))
            first = await collect(runner, make_request(1, "orders?"))
            second = await collect(runner, make_request(2, "again?"))
            runs[mode] = _normalized(first) + _normalized(second)
        await remote.aclose()
    assert runs["package"] == runs["service"]
    assert runs["service"][-1]["type"] == "turn.failed"


# -- service mode specifics ---------------------------------------------------------------


async def test_the_service_checks_its_token_and_answers_health(make_shell: MakeShell) -> None:
    app = create_service_app(make_shell(), service_token=SERVICE_TOKEN)
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        body = make_request().model_dump(mode="json")
        denied = await client.post("/v1/response", json=body)
        assert denied.status_code == 401 and denied.json()["code"] == "unauthorized"
        wrong = await client.post("/v1/response", json=body, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        missing = await client.post(
            "/v1/response/99/cancel", headers={"Authorization": f"Bearer {SERVICE_TOKEN}"}
        )
        assert missing.status_code == 404 and missing.json()["code"] == "not_found"


async def test_a_service_that_cannot_be_reached_still_ends_the_turn() -> None:
    remote = RemoteChatShell(f"http://127.0.0.1:{free_port()}", connect_timeout=1.0)
    events = await collect(remote, make_request())
    await remote.aclose()
    assert [e.type for e in events] == ["turn.started", "turn.failed"]
    assert events[-1].code == "runtime_unavailable"  # type: ignore[union-attr]
    assert events[-1].result.termination_reason == "internal_error"  # type: ignore[union-attr]


async def test_a_stream_broken_mid_turn_keeps_the_text_and_tools_it_showed(
    scripted_provider: ScriptedProvider, make_shell: MakeShell
) -> None:
    scripted_provider.script(
        Reply(
            text="Let me check.",
            tool_calls=[ScriptedToolCall(id="call_a", name="generate_report", args={"rows": 2, "seed": 3})],
        ),
        text("one two three four five six seven eight nine ten", token_delay=0.2),
    )
    async with serve(create_service_app(make_shell())) as url:
        with tcp_proxy(url) as proxy:
            remote = RemoteChatShell(proxy.base_url)
            events: list[TurnEvent] = []
            async for event in remote.run(make_request()):
                events.append(event)
                if event.type == "message.delta" and event.text.startswith("\n\n"):
                    proxy.cut()  # the second round has begun
            await remote.aclose()
    failed = events[-1]
    assert failed.type == "turn.failed" and failed.code == "runtime_unavailable"  # type: ignore[union-attr]
    result = failed.result  # type: ignore[union-attr]
    assert failed.partial == result.value == deltas(events)  # type: ignore[union-attr]
    first, tool, second = result.blocks
    assert first == TextBlock(text="Let me check.") and second.text.startswith("\n\none")
    assert isinstance(tool, ToolBlock) and tool.status == "completed" and tool.output


async def test_a_rejected_request_ends_the_turn_with_a_clear_failure(make_shell: MakeShell) -> None:
    async with serve(create_service_app(make_shell(), service_token=SERVICE_TOKEN)) as url:
        remote = RemoteChatShell(url, token="wrong")
        events = await collect(remote, make_request())
        await remote.aclose()
    assert events[-1].type == "turn.failed" and "unavailable" in events[-1].message  # type: ignore[union-attr]


async def test_a_backend_that_hangs_up_stops_the_turn_in_the_service(
    scripted_provider: ScriptedProvider, make_shell: MakeShell, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="chat_shell.runtime")
    shell = make_shell()
    scripted_provider.script(text("a long answer " * 50, token_delay=0.02))

    def persistence_lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith("[Persistence]")]

    async with serve(create_service_app(shell)) as url:
        remote = RemoteChatShell(url)
        stream = remote.run(make_request())
        async for event in stream:
            if event.type == "message.delta":
                break
        await stream.aclose()
        await remote.aclose()
        for _ in range(100):
            if persistence_lines():
                break
            await asyncio.sleep(0.05)
    [line] = persistence_lines()
    assert "ending=abandoned" in line and line.endswith("deleted=True")
    assert not shell.checkpointer.storage
