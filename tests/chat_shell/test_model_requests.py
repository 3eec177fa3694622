"""Every model call's request as sent (issue 19): the turn result lists it entry by entry, in the
order and with the text the provider received, each counted as the guard counted the request."""

from __future__ import annotations

from typing import Any

from chat_shell.contracts import ChainMessage, ContextMetricsEvent, TurnCompleted
from tests.chat_shell.conftest import MakeShell
from tests.support.mcp_servers import stdio_server
from tests.support.scripted_provider import ScriptedProvider, counted_as_sent, text, tool_call
from tests.support.turns import collect, make_request


def sent_texts(body: dict[str, Any]) -> list[str]:
    return [str(message.get("content") or "") for message in body["messages"]]


async def test_each_model_call_is_recorded_as_the_provider_received_it(
    make_shell: MakeShell, scripted_provider: ScriptedProvider
) -> None:
    shell = make_shell(system_prompt="You are a careful assistant.")
    history = [
        ChainMessage(role="user", content="earlier question", id="u-old"),
        ChainMessage(role="assistant", content="earlier answer", id="a-old"),
    ]
    scripted_provider.script(tool_call("generate_report", {"rows": 2}), text("done"))
    events = await collect(shell, make_request(2, "report please", history=history))
    terminal = events[-1]
    assert isinstance(terminal, TurnCompleted)
    requests = terminal.result.requests
    assert len(requests) == len(scripted_provider.requests) == 2
    metrics = [e.snapshot for e in events if isinstance(e, ContextMetricsEvent)]
    for request, body in zip(requests, scripted_provider.requests, strict=True):
        messages = [e for e in request.entries if e.role != "tool_schema"]
        tools = [e for e in request.entries if e.role == "tool_schema"]
        assert [e.role for e in messages] == [m["role"] for m in body["messages"]]
        # Message texts as sent (assistant tool calls are listed after the content).
        shown = [e.text.split("→ ")[0].rstrip("\n") if e.role == "assistant" else e.text for e in messages]
        assert shown == sent_texts(body)
        assert [e.name for e in tools] == [t["function"]["name"] for t in body["tools"]]
        assert all(e.tokens > 0 for e in request.entries)
    first, second = requests
    assert [e.source for e in first.entries if e.role != "tool_schema"] == [
        "system",
        "history",
        "history",
        "current_input",
    ]
    assert [e.source for e in second.entries if e.role != "tool_schema"][-3:] == [
        "current_input",
        "history",
        "tool_output",
    ]
    assert second.entries[4].text.startswith("→ generate_report(")
    # The guard's count of the request it shaped is the sum of the entries.
    assert metrics[0].calibration["local_tokens"] == first.total_tokens


async def test_the_turns_mcp_tools_and_the_chats_instructions_are_listed_as_sent(
    make_shell: MakeShell, scripted_provider: ScriptedProvider
) -> None:
    shell = make_shell(system_prompt="Operator rules.", mcp_servers={"ops": stdio_server()})
    try:
        scripted_provider.script(tool_call("ops_echo", {"text": "pong"}), text("It said pong."))
        events = await collect(shell, make_request(1, "ping the ops server", instructions="Answer briefly."))
    finally:
        await shell.aclose()
    terminal = events[-1]
    assert isinstance(terminal, TurnCompleted)
    requests = terminal.result.requests
    assert len(requests) == len(scripted_provider.chat_requests) == 2
    for request, body in zip(requests, scripted_provider.chat_requests, strict=True):
        tools = [e for e in request.entries if e.role == "tool_schema"]
        assert [e.name for e in tools] == [t["function"]["name"] for t in body["tools"]]
        assert {"ops_echo", "ops_logs"} <= {e.name for e in tools}
        assert all((e.server == "ops") == (e.name or "").startswith("ops_") for e in tools)
        # The one system message as its two parts: the operator's prompt, the chat's instructions.
        system, instructions = request.entries[:2]
        assert (system.source, system.text) == ("system", "Operator rules.")
        assert (instructions.source, instructions.text) == ("instructions", "Answer briefly.")
        assert body["messages"][0]["content"] == "Operator rules.\n\nAnswer briefly."
        # MCP schemas included, the entries add up to the request the provider received.
        assert request.total_tokens == counted_as_sent(body)
