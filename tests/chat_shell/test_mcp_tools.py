"""MCP servers' tools in turns: real MCP servers (the `mcp` SDK, stdio and streamable HTTP)
started by the tests, the scripted provider as the model."""

from __future__ import annotations

import asyncio
from base64 import b64encode
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from chat_shell.accounting.budget import budget_for
from chat_shell.accounting.token_counter import IMAGE_PART_TOKENS, TokenCounter
from chat_shell.api.app import create_service_app
from chat_shell.contracts import ChainMessage, TurnRuntime
from chat_shell.runtime import ChatShell
from chat_shell.service_client import RemoteChatShell
from chat_shell.sizes import byte_size
from chat_shell.tools.mcp import McpToolbox
from chat_shell.tools.mcp_config import McpConfigurationError, connection_for, load_servers
from tests.chat_shell.conftest import MakeShell
from tests.support.files import PNG_1X1
from tests.support.mcp_server import log_text
from tests.support.mcp_servers import HttpMcpProcess, http_mcp_server, http_server_config, stdio_server
from tests.support.scripted_provider import (
    Reply,
    ScriptedProvider,
    ScriptedToolCall,
    count_prompt_tokens,
    counted_as_sent,
    text,
    tool_call,
)
from tests.support.servers import serve
from tests.support.telemetry import Recorded
from tests.support.turns import collect, deltas, make_request

ShellWith = Callable[..., ChatShell]


@pytest.fixture
async def shell_with(make_shell: MakeShell) -> AsyncIterator[ShellWith]:
    """`shell_with(name=config, ...)`: a runtime with these MCP servers, closed after the test."""
    made: list[ChatShell] = []

    def factory(**servers: Any) -> ChatShell:
        options = servers.pop("options", {})
        shell = make_shell(mcp_servers=servers, **options)
        made.append(shell)
        return shell

    yield factory
    for shell in made:
        await shell.aclose()


@pytest.fixture(scope="module")
def http_server() -> AsyncIterator[HttpMcpProcess]:
    with http_mcp_server() as server:
        yield server


def _offered(body: dict[str, Any]) -> list[str]:
    return [entry["function"]["name"] for entry in body.get("tools", [])]


def _tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "tool"]


def _completed(events: list[Any]) -> list[Any]:
    return [e for e in events if e.type == "tool.completed"]


async def test_a_stdio_servers_tools_are_offered_beside_the_built_ins_and_answer(
    shell_with: ShellWith, scripted_provider: ScriptedProvider
) -> None:
    shell = shell_with(ops=stdio_server())
    scripted_provider.script(tool_call("ops_echo", {"text": "pong from mcp"}), text("It said pong."))
    events = await collect(shell, make_request(1, "ping the ops server"))
    first, second = scripted_provider.chat_requests
    assert {"ops_echo", "ops_logs", "ops_hang", "ops_explode", "ops_crash"} <= set(_offered(first))
    assert _tool_messages(second)[-1]["content"] == "pong from mcp"  # the text, not JSON parts
    started = next(e for e in events if e.type == "tool.started")
    assert started.server == "ops"
    assert [e.output for e in _completed(events)] == ["pong from mcp"]
    assert events[-1].type == "turn.completed"


async def test_a_streamable_http_server_gets_its_headers_from_the_named_environment_variables(
    shell_with: ShellWith,
    scripted_provider: ScriptedProvider,
    http_server: HttpMcpProcess,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEST_MCP_TOKEN", "Bearer s3cret")
    config = http_server_config(http_server.url, headers_from_env={"Authorization": "TEST_MCP_TOKEN"})
    shell = shell_with(web=config)
    scripted_provider.script(tool_call("web_header", {"name": "authorization"}), text("ok"))
    events = await collect(shell, make_request(1, "who am I"))
    assert [e.output for e in _completed(events)] == ["Bearer s3cret"]
    assert events[-1].type == "turn.completed"


async def test_the_tool_list_is_loaded_once_and_reloaded_when_the_server_changes_it(
    shell_with: ShellWith, scripted_provider: ScriptedProvider
) -> None:
    shell = shell_with(ops=stdio_server())
    assert shell.mcp is not None
    scripted_provider.script(text("a"), text("b"))
    await collect(shell, make_request(1, "one"))
    offered = await shell.mcp.offer(None)
    await collect(shell, make_request(2, "two"))
    assert await shell.mcp.offer(None) is offered  # same tools, schemas and binding key
    assert _offered(scripted_provider.chat_requests[0]) == _offered(scripted_provider.chat_requests[1])

    scripted_provider.script(tool_call("ops_grow"), text("grown"), text("c"))
    await collect(shell, make_request(3, "grow"))
    await _until(lambda: "ops_added_11" in [t.name for t in shell.mcp.views()[0].tools])
    await collect(shell, make_request(4, "again"))
    assert "ops_added_11" in _offered(scripted_provider.chat_requests[-1])
    assert "ops_added_11" not in _offered(scripted_provider.chat_requests[0])


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the condition did not come true in time")


def test_the_servers_file_declares_http_and_stdio_servers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "mcp.toml"
    path.write_text(
        "[servers.logs]\n"
        'transport = "streamable_http"\n'
        'url = "http://127.0.0.1:9/mcp"\n'
        'headers_from_env = { Authorization = "LOGS_TOKEN" }\n'
        "[servers.files]\n"
        'transport = "stdio"\n'
        'command = "mcp-files"\n'
        'args = ["/srv"]\n'
        'env = { LOG_LEVEL = "warning" }\n'
        "enabled_by_default = false\n"
    )
    servers = load_servers(path)
    assert set(servers) == {"logs", "files"} and servers["files"].enabled_by_default is False
    with pytest.raises(McpConfigurationError, match="LOGS_TOKEN"):
        connection_for(servers["logs"])
    monkeypatch.setenv("LOGS_TOKEN", "Bearer t")
    assert connection_for(servers["logs"])["headers"] == {"Authorization": "Bearer t"}
    assert connection_for(servers["files"]) == {
        "transport": "stdio",
        "command": "mcp-files",
        "args": ["/srv"],
        "env": {"LOG_LEVEL": "warning"},
        "cwd": None,
    }
    path.write_text('{"servers": {"bad name": {"transport": "stdio", "command": "x"}}}')
    path.rename(tmp_path / "mcp.json")
    with pytest.raises(McpConfigurationError, match="invalid MCP servers"):
        load_servers(tmp_path / "mcp.json")


# -- governed outputs --------------------------------------------------------------------------

WINDOW = 64_000  # 48,000 input tokens; five 100,000-character outputs are far more than that


def _five_log_rounds() -> list[Reply]:
    rounds = [
        Reply(
            tool_calls=[
                ScriptedToolCall(id=f"call_{n}", name="ops_logs", args={"chars": 100_000, "offset": n})
            ]
        )
        for n in range(5)
    ]
    return [*rounds, text("The logs show nothing but successful requests.")]


async def _five_rounds(runner: TurnRuntime, provider: ScriptedProvider) -> list[Any]:
    provider.script(*_five_log_rounds())
    return await collect(runner, make_request(1, "read the logs five times"))


async def test_five_rounds_of_large_mcp_outputs_stay_within_budget_and_the_user_sees_them_whole(
    shell_with: ShellWith, scripted_provider: ScriptedProvider
) -> None:
    shell = shell_with(ops=stdio_server(), options={"context_window": WINDOW})
    budget = budget_for(shell.profile())
    events = await _five_rounds(shell, scripted_provider)
    assert events[-1].type == "turn.completed"
    requests = scripted_provider.chat_requests
    assert len(requests) == 6
    for number, body in enumerate(requests):
        assert count_prompt_tokens(body) <= budget.available_input
        if number:  # the model sees the output it asked for, in compact form
            assert body["messages"][-1]["tool_call_id"] == f"call_{number - 1}"
        for message in _tool_messages(body):
            assert message["content"].startswith("[tool_output name=ops_logs ")
            assert "call ops_logs again with its `offset` argument" in message["content"]
    completed = _completed(events)
    assert [e.output for e in completed] == [log_text(100_000, n) for n in range(5)]
    assert all(e.truncated_for_model for e in completed)
    blocks = [b for b in events[-1].result.blocks if b.type == "tool"]
    assert [b.output for b in blocks] == [log_text(100_000, n) for n in range(5)]


async def test_a_per_tool_output_budget_applies_to_an_mcp_tool_by_name(
    shell_with: ShellWith, scripted_provider: ScriptedProvider
) -> None:
    overrides = {"*": {"tool_output_overrides": {"ops_logs": 600}}}
    shell = shell_with(ops=stdio_server(), options={"profile_overrides": overrides})
    counter = TokenCounter.for_profile(shell.profile())
    scripted_provider.script(
        tool_call("ops_logs", {"chars": 20_000}), tool_call("ops_echo", {"text": "x" * 3000})
    )
    scripted_provider.script(text("done"))
    await collect(shell, make_request(1, "logs"))
    logs, echo = _tool_messages(scripted_provider.chat_requests[-1])
    assert counter.count_text(logs["content"]) <= 600 < counter.count_text(log_text(20_000))
    assert echo["content"] == "x" * 3000  # other tools keep the default budget


async def test_package_and_service_mode_send_the_model_the_same_requests(
    shell_with: ShellWith, scripted_provider: ScriptedProvider
) -> None:
    shell = shell_with(ops=stdio_server(), options={"context_window": WINDOW})
    await _five_rounds(shell, scripted_provider)
    in_process = scripted_provider.chat_requests
    scripted_provider.reset()
    async with serve(create_service_app(shell, service_token="secret")) as url:
        remote = RemoteChatShell(url, token="secret")
        events = await _five_rounds(remote, scripted_provider)
        await remote.aclose()
    assert events[-1].type == "turn.completed"
    assert scripted_provider.chat_requests == in_process


# -- faults ------------------------------------------------------------------------------------


async def test_a_hanging_a_raising_and_a_malformed_tool_end_in_tool_errors_and_the_turn_completes(
    shell_with: ShellWith, scripted_provider: ScriptedProvider
) -> None:
    shell = shell_with(ops=stdio_server(call_timeout_seconds=1.0))
    calls = [ScriptedToolCall(id=f"call_{name}", name=f"ops_{name}") for name in ("hang", "explode", "noise")]
    scripted_provider.script(*(Reply(tool_calls=[call]) for call in calls), text("All three failed."))
    events = await collect(shell, make_request(1, "try them"))
    assert events[-1].type == "turn.completed"
    assert deltas(events) == "All three failed."
    hang, explode, noise = _tool_messages(scripted_provider.chat_requests[-1])
    assert "ops_hang did not answer within 1 s" in hang["content"]
    assert "the disk is on fire" in explode["content"]
    assert "NotImplementedError" in noise["content"] and "AudioContent" in noise["content"]
    assert all(e.is_error for e in _completed(events))


async def test_a_server_that_exits_mid_call_is_shown_unavailable_and_the_next_turn_works_without_it(
    shell_with: ShellWith, scripted_provider: ScriptedProvider
) -> None:
    shell = shell_with(ops=stdio_server(reconnect_seconds=600), web=stdio_server())
    assert shell.mcp is not None
    scripted_provider.script(tool_call("ops_crash"), text("It crashed."))
    events = await collect(shell, make_request(1, "crash it"))
    assert events[-1].type == "turn.completed"
    assert (
        "the MCP server ops went away during the call"
        in _tool_messages(scripted_provider.last_request)[0]["content"]
    )
    status = {view.name: view.status for view in shell.mcp.views()}
    assert status == {"ops": "unavailable", "web": "available"}

    scripted_provider.script(tool_call("web_echo", {"text": "still here"}), text("ok"))
    events = await collect(shell, make_request(2, "and now"))
    offered = _offered(scripted_provider.chat_requests[-2])
    assert "web_echo" in offered and not any(name.startswith("ops_") for name in offered)
    assert [e.output for e in _completed(events)] == ["still here"]


async def test_a_server_down_at_start_is_unavailable_and_reconnects_by_itself(
    shell_with: ShellWith, scripted_provider: ScriptedProvider
) -> None:
    server = HttpMcpProcess()
    shell = shell_with(
        web=http_server_config(server.url, reconnect_seconds=0.2, connect_timeout_seconds=5),
        ops=stdio_server(),
    )
    assert shell.mcp is not None
    scripted_provider.script(text("without web"))
    await collect(shell, make_request(1, "hello"))
    assert {view.name: view.status for view in shell.mcp.views()} == {
        "web": "unavailable",
        "ops": "available",
    }
    assert "ops_echo" in _offered(scripted_provider.last_request)
    assert not any(name.startswith("web_") for name in _offered(scripted_provider.last_request))
    server.start()
    try:
        await _until(lambda: shell.mcp.views()[0].status == "available")
        scripted_provider.script(tool_call("web_echo", {"text": "back"}), text("ok"))
        events = await collect(shell, make_request(2, "again"))
        assert [e.output for e in _completed(events)] == ["back"]
    finally:
        server.stop()


async def test_a_stop_cancels_a_running_tool_call(
    shell_with: ShellWith, scripted_provider: ScriptedProvider
) -> None:
    shell = shell_with(ops=stdio_server())
    scripted_provider.script(tool_call("ops_hang"))
    cancel = asyncio.Event()
    events = []
    async for event in shell.run(make_request(1, "wait"), cancel):
        events.append(event)
        if event.type == "tool.started":
            cancel.set()
    assert events[-1].type == "turn.cancelled"
    scripted_provider.script(tool_call("ops_echo", {"text": "free again"}), text("ok"))
    events = await collect(shell, make_request(2, "next"))
    assert [e.output for e in _completed(events)] == ["free again"]


# -- per conversation --------------------------------------------------------------------------


async def test_a_conversation_uses_the_servers_it_enabled_or_the_default_set_and_the_meter_counts_them(
    shell_with: ShellWith, scripted_provider: ScriptedProvider
) -> None:
    shell = shell_with(ops=stdio_server(), extra=stdio_server("--tools", "3", enabled_by_default=False))
    runs = {}
    for turn, chosen in enumerate((None, [], ["extra"], ["ops", "extra"]), start=1):
        scripted_provider.script(text("ok"))
        events = await collect(shell, make_request(turn, "hi", mcp_servers=chosen))
        metrics = next(e for e in events if e.type == "context.metrics").snapshot
        offered = _offered(scripted_provider.last_request)
        servers = {name.split("_")[0] for name in offered} & {"ops", "extra"}
        runs[turn] = (servers, metrics.breakdown["tool_schemas"])
    assert [servers for servers, _ in runs.values()] == [{"ops"}, set(), {"extra"}, {"ops", "extra"}]
    assert runs[2][1] < runs[1][1] < runs[3][1] < runs[4][1]  # "extra" has three tools more


async def test_a_selection_whose_schemas_alone_exceed_their_share_is_refused_with_a_clear_message(
    shell_with: ShellWith, scripted_provider: ScriptedProvider
) -> None:
    shell = shell_with(big=stdio_server("--tools", "150"), options={"context_window": 24_000})
    events = await collect(shell, make_request(1, "hi"))
    failed = events[-1]
    assert failed.type == "turn.failed" and failed.code == "context_refused"
    assert "Enable fewer MCP servers" in failed.message
    assert scripted_provider.chat_requests == []  # the model was never called


# -- operators ---------------------------------------------------------------------------------


async def test_calls_are_counted_per_server_tool_and_outcome_timed_and_traced_with_the_server(
    telemetry: Recorded, shell_with: ShellWith, scripted_provider: ScriptedProvider
) -> None:
    shell = shell_with(obs=stdio_server(call_timeout_seconds=1.0))
    names = ("echo", "echo", "explode", "hang")
    before = {
        (tool, outcome): telemetry.total(
            "chat_shell.mcp.tool_calls", mcp_server="obs", tool=f"obs_{tool}", outcome=outcome
        )
        for tool, outcome in (("echo", "ok"), ("explode", "error"), ("hang", "timeout"))
    }
    timed = telemetry.total("chat_shell.mcp.tool_duration", mcp_server="obs", tool="obs_echo")
    calls = [
        ScriptedToolCall(name=f"obs_{name}", args={"text": "x"} if name == "echo" else {}) for name in names
    ]
    scripted_provider.script(*(Reply(tool_calls=[call]) for call in calls), text("done"))
    events = await collect(shell, make_request(301, "use them"))
    ended = [(e.name, e.mcp_outcome) for e in _completed(events)]
    assert ended == [
        ("obs_echo", "ok"),
        ("obs_echo", "ok"),
        ("obs_explode", "error"),
        ("obs_hang", "timeout"),
    ]
    assert all(e.duration_ms is not None and e.duration_ms > 0 for e in _completed(events))

    def delta(tool: str, outcome: str) -> float:
        now = telemetry.total(
            "chat_shell.mcp.tool_calls", mcp_server="obs", tool=f"obs_{tool}", outcome=outcome
        )
        return now - before[(tool, outcome)]

    assert (delta("echo", "ok"), delta("explode", "error"), delta("hang", "timeout")) == (2, 1, 1)
    assert telemetry.total("chat_shell.mcp.tool_duration", mcp_server="obs", tool="obs_echo") == timed + 2
    spans = [s for s in telemetry.finished_spans() if s.name.startswith("execute_tool obs_")]
    assert len(spans) >= 4 and all(s.attributes["chat_shell.mcp.server"] == "obs" for s in spans)


@pytest.mark.parametrize("after_seconds", [0.05, 0.2, 1.0])
async def test_a_runtime_closed_while_a_server_still_connects_shuts_down_at_once(
    after_seconds: float,
) -> None:
    """A stop during the stdio client's start used to surface as a broken stream, be taken for
    a lost server, and leave the supervisor reconnecting: shutdown then hung for good."""
    toolbox = McpToolbox.from_config({"tools": stdio_server()})
    for server in toolbox.servers.values():
        server.start()
    await asyncio.sleep(after_seconds)
    async with asyncio.timeout(10):
        await toolbox.aclose()


# -- images ------------------------------------------------------------------------------------

SEES_IMAGES = {"profile_overrides": {"*": {"accepts_images": True}}}
PNG_LINE = f"[image image/png {byte_size(len(PNG_1X1))}]"
PNG_PART = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64encode(PNG_1X1).decode()}"}}


def _image_parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message["content"]
    return [p for p in content if p.get("type") != "text"] if isinstance(content, list) else []


def _text_of(message: dict[str, Any]) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "\n".join(p["text"] for p in content if p.get("type") == "text")


async def test_a_text_only_model_gets_an_mcp_image_as_a_placeholder_line_and_no_image_part(
    shell_with: ShellWith, scripted_provider: ScriptedProvider
) -> None:
    shell = shell_with(ops=stdio_server())
    scripted_provider.script(tool_call("ops_snapshot"), text("A dashboard."))
    events = await collect(shell, make_request(1, "show me the dashboard"))
    assert events[-1].type == "turn.completed"
    body = scripted_provider.chat_requests[-1]
    (tool,) = _tool_messages(body)
    unseen = f"[image image/png {byte_size(len(PNG_1X1))}: not shown, this model does not take images]"
    assert _text_of(tool) == f"dashboard at 10:00\n{unseen}"
    assert not any(_image_parts(m) for m in body["messages"])
    assert [m["role"] for m in body["messages"]][-2:] == ["assistant", "tool"]
    # The user's block keeps the text and each image's type and size, never its bytes.
    (completed,) = _completed(events)
    assert completed.output == f"dashboard at 10:00\n{PNG_LINE}"
    (block,) = [b for b in events[-1].result.blocks if b.type == "tool"]
    assert block.output == completed.output and not block.truncated_for_model
    (stored,) = [m for m in events[-1].result.messages_chain if m.role == "tool"]
    assert stored.content == unseen.join(["dashboard at 10:00\n", ""])


def _snapshot_and_echo() -> list[Reply]:
    calls = [
        ScriptedToolCall(id="call_shot", name="ops_snapshot"),
        ScriptedToolCall(id="call_echo", name="ops_echo", args={"text": "hi"}),
    ]
    again = ScriptedToolCall(id="call_again", name="ops_echo", args={"text": "again"})
    return [Reply(tool_calls=calls), Reply(tool_calls=[again]), text("A dashboard.")]


async def test_a_model_that_accepts_images_gets_an_mcp_image_in_a_user_message_after_the_tool_round(
    shell_with: ShellWith, scripted_provider: ScriptedProvider
) -> None:
    shell = shell_with(ops=stdio_server(), options=SEES_IMAGES)
    scripted_provider.script(*_snapshot_and_echo())
    events = await collect(shell, make_request(1, "show me the dashboard"))
    assert events[-1].type == "turn.completed"
    second, third = scripted_provider.chat_requests[1:]
    for body in (second, third):  # the same on every later call of the turn, never twice
        roles = [m["role"] for m in body["messages"]]
        assert roles[:5] == ["user", "assistant", "tool", "tool", "user"]
        shot, echo = body["messages"][2:4]
        assert (shot["tool_call_id"], echo["tool_call_id"]) == ("call_shot", "call_echo")
        assert _text_of(shot) == f"dashboard at 10:00\n{PNG_LINE}"
        assert not any(_image_parts(m) for m in _tool_messages(body))
        pictures = body["messages"][4]
        assert "call_shot" in _text_of(pictures)
        assert _image_parts(pictures) == [PNG_PART]
        assert sum(len(_image_parts(m)) for m in body["messages"]) == 1
    assert second["messages"] == third["messages"][:5]
    # Counted as sent: the picture at its per-image cost, its user message and label included.
    recorded = events[-1].result.requests
    assert [r.total_tokens for r in recorded[1:]] == [counted_as_sent(second), counted_as_sent(third)]
    (completed, _) = _completed(events)[:2]
    assert completed.output == f"dashboard at 10:00\n{PNG_LINE}"
    # No event (and so no event log, block or stored chain) carries the picture's bytes.
    assert not any(b64encode(PNG_1X1).decode() in event.model_dump_json() for event in events)


async def test_a_malformed_mcp_image_becomes_a_placeholder_with_the_reason_and_the_turn_goes_on(
    shell_with: ShellWith, scripted_provider: ScriptedProvider
) -> None:
    shell = shell_with(ops=stdio_server(), options=SEES_IMAGES)
    scripted_provider.script(tool_call("ops_broken_snapshot"), text("It did not work."))
    events = await collect(shell, make_request(1, "show me the dashboard"))
    assert events[-1].type == "turn.completed"
    body = scripted_provider.chat_requests[-1]
    (tool,) = _tool_messages(body)
    assert _text_of(tool).splitlines() == [
        "dashboard at 10:05",
        "[image image/png: not shown, its data is not valid base64]",
        "[image text/html: not shown, its type is not an image type]",
    ]
    assert not any(_image_parts(m) for m in body["messages"])
    (completed,) = _completed(events)
    assert not completed.is_error and completed.output == _text_of(tool)


async def test_package_and_service_mode_show_an_mcp_image_alike(
    shell_with: ShellWith, scripted_provider: ScriptedProvider
) -> None:
    shell = shell_with(ops=stdio_server(), options=SEES_IMAGES)
    scripted_provider.script(*_snapshot_and_echo())
    await collect(shell, make_request(1, "show me the dashboard"))
    in_process = scripted_provider.chat_requests
    scripted_provider.reset()
    async with serve(create_service_app(shell, service_token="secret")) as url:
        remote = RemoteChatShell(url, token="secret")
        scripted_provider.script(*_snapshot_and_echo())
        events = await collect(remote, make_request(1, "show me the dashboard"))
        await remote.aclose()
    assert events[-1].type == "turn.completed"
    assert scripted_provider.chat_requests == in_process
    assert _completed(events)[0].output == f"dashboard at 10:00\n{PNG_LINE}"


async def test_a_summary_in_the_middle_of_the_turn_keeps_the_picture_with_its_tool_result(
    shell_with: ShellWith, scripted_provider: ScriptedProvider
) -> None:
    history = [
        ChainMessage(role=role, content=log_text(6_000, n), id=f"h{n}")  # type: ignore[arg-type]
        for n, role in enumerate(["user", "assistant"] * 3)
    ]
    settings = {"overhead_tokens": 0, "keep_tokens": 5_000}

    async def run(trigger: int) -> list[Any]:
        shell = shell_with(
            ops=stdio_server(),
            options={
                "profile_overrides": {"*": {"accepts_images": True, "trigger_tokens": trigger, **settings}}
            },
        )
        scripted_provider.script(tool_call("ops_snapshot"), text("A dashboard."))
        return await collect(shell, make_request(1, "show me the dashboard", history=history))

    probe = await run(1_000_000)
    used = {e.snapshot.phase: e.snapshot.used_input for e in probe if e.type == "context.metrics"}
    assert used["mid_turn"] > used["pre_turn"] + IMAGE_PART_TOKENS
    scripted_provider.reset()
    events = await run((used["pre_turn"] + used["mid_turn"]) // 2)  # crossed by the tool round
    assert scripted_provider.chat_requests[0]["messages"][0]["content"] == log_text(6_000, 0)
    assert events[-1].type == "turn.completed"
    assert [e.record.status for e in events if e.type == "context.compaction"][-1] == "completed"
    body = scripted_provider.chat_requests[-1]
    roles = [m["role"] for m in body["messages"]]
    assert roles[0] == "user" and body["messages"][0]["content"].startswith("[Summary of earlier turns]")
    assert roles[-3:] == ["assistant", "tool", "user"]  # the kept tail: the round and its picture
    assert _text_of(body["messages"][-2]) == f"dashboard at 10:00\n{PNG_LINE}"
    assert _image_parts(body["messages"][-1]) == [PNG_PART]
    assert sum(len(_image_parts(m)) for m in body["messages"]) == 1
    assert events[-1].result.requests[-1].total_tokens == counted_as_sent(body)
