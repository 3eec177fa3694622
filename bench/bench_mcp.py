"""MCP tools (issue 23): schema loading at turn start, and the guard's cost after an MCP output.

    python -m bench.bench_mcp

Against a real MCP server (the test server over stdio, `mcp` SDK) with 100 tools:

1. Loading and counting 100 tool schemas. Cold: the server's tool list converted by the
   adapter, the schemas made and counted once (what a connection or a changed tool list costs).
   Turn start: what every turn pays while the tool list is unchanged (the enabled servers' tool
   set, joined with the built-ins, and its schema count): target at most 50 ms.
2. The guard's mid-turn call right after a 100,000-character tool output, the output of an MCP
   tool (called for real through the adapter) against a built-in tool's output of the same
   size: target within 1.5x. Each sample is a fresh guard that has seen the turn's start, so
   every timed call counts and compacts the new output.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from bench.common import row, verdict
from chat_shell.accounting.budget import budget_for
from chat_shell.accounting.token_counter import TokenCounter
from chat_shell.agents.builder import shaped_result
from chat_shell.contracts import TurnEvent
from chat_shell.guard.context_guard import UnifiedContextGuard
from chat_shell.providers.profiles import resolve_profile
from chat_shell.tools.mcp import McpServer, McpToolbox
from chat_shell.tools.mcp_config import StdioServer
from chat_shell.tools.registry import TurnFacts, default_tools
from tests.support.mcp_servers import ROOT
from tests.support.report_tool import generate_report

TOOLS = 100
STANDARD_TOOLS = 11  # the test server's own tools; the rest are numbered lookups
OUTPUT_CHARS = 100_000
TURN_START_MS = 50.0
GUARD_RATIO = 1.5


def _server_config() -> StdioServer:
    return StdioServer(
        transport="stdio",
        command=sys.executable,
        args=["-m", "tests.support.mcp_server", "stdio", "--tools", str(TOOLS - STANDARD_TOOLS)],
        env={"PYTHONPATH": str(ROOT)},
        cwd=str(ROOT),
    )


def _median_ms(fn: Callable[[], Any], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


async def _turn_start_ms(toolbox: McpToolbox, repeat: int) -> float:
    registry = default_tools()
    profile = resolve_profile("gpt-4o")
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        counter = TokenCounter.for_profile(profile)  # a fresh counter per turn, as the runtime makes
        offered = registry.offered(TurnFacts(), await toolbox.offer(None))
        offered.schema_tokens(counter)
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def _cold_ms(server: McpServer, listed: list[Any]) -> float:
    counter = TokenCounter.for_profile(resolve_profile("gpt-4o"))

    def load() -> None:
        server._listing.digest = ""  # forget the converted list: convert, make and count again
        server._use(listed)
        server.offered().schema_tokens(counter)

    return _median_ms(load, 5)


def _guard_call_ms(output: ToolMessage, repeat: int) -> float:
    profile = resolve_profile("gpt-4o")
    budget = budget_for(profile)
    call = AIMessage("", id="ai-1", tool_calls=[{"id": "call_1", "name": output.name, "args": {}}])
    start: list[BaseMessage] = [SystemMessage("You are helpful.", id="sys"), HumanMessage("read it", id="h1")]
    events: list[TurnEvent] = []

    async def sample() -> float:
        guard = UnifiedContextGuard(
            profile, budget, emit=events.append, counter=TokenCounter.for_profile(profile)
        )
        await guard({"messages": start})
        began = time.perf_counter()
        await guard({"messages": [*start, call, output]})
        return (time.perf_counter() - began) * 1000

    async def run() -> float:
        for _ in range(2):
            await sample()
        return statistics.median([await sample() for _ in range(repeat)])

    return asyncio.run(run())


async def _mcp_output(server: McpServer) -> ToolMessage:
    tool = server.offered().by_name["bench_logs"]
    message = await tool.ainvoke(
        {"name": tool.name, "args": {"chars": OUTPUT_CHARS}, "id": "call_1", "type": "tool_call"}
    )
    result = shaped_result(message)
    assert isinstance(result, ToolMessage) and isinstance(result.content, str)
    return result


async def _builtin_output() -> ToolMessage:
    rows = 1
    text = ""
    while len(text) < OUTPUT_CHARS:
        rows *= 2
        text = await generate_report.ainvoke({"rows": rows})
    return ToolMessage(text[:OUTPUT_CHARS], tool_call_id="call_1", name="generate_report", id="tool-1")


async def main() -> None:
    toolbox = McpToolbox.from_config({"bench": _server_config()})
    server = toolbox.servers["bench"]
    try:
        connect_start = time.perf_counter()
        first = await toolbox.offer(None)
        connect_ms = (time.perf_counter() - connect_start) * 1000
        assert len(first.tools) == TOOLS, f"expected {TOOLS} tools, the server lists {len(first.tools)}"
        turn_start = await _turn_start_ms(toolbox, 51)
        assert server._session is not None
        listed = (await server._session.list_tools()).tools
        cold = _cold_ms(server, listed)
        mcp_message = await _mcp_output(server)
    finally:
        await toolbox.aclose()
    builtin_message = await _builtin_output()
    mcp_message = mcp_message.model_copy(update={"id": "tool-1"})

    print(f"{TOOLS} MCP tool schemas (stdio test server, mcp SDK + langchain-mcp-adapters)")
    row("", "median ms", "target", "")
    row("first turn: connect, list, convert, count", f"{connect_ms:.1f}", "-", "")
    row("cold: convert + schemas + count", f"{cold:.2f}", "-", "")
    row(
        "turn start (tool list unchanged)",
        f"{turn_start:.3f}",
        f"<= {TURN_START_MS:.0f}",
        verdict(turn_start <= TURN_START_MS),
    )

    mcp_ms = await asyncio.to_thread(_guard_call_ms, mcp_message, 15)
    builtin_ms = await asyncio.to_thread(_guard_call_ms, builtin_message, 15)
    ratio = mcp_ms / builtin_ms
    print(f"\nGuard mid-turn call after a {OUTPUT_CHARS:,}-character tool output (gpt-4o profile)")
    row("", "median ms", "", "")
    row("after the MCP tool's output", f"{mcp_ms:.2f}", "", "")
    row("after the built-in tool's output", f"{builtin_ms:.2f}", "", "")
    row("ratio MCP / built-in", f"{ratio:.2f}x", f"<= {GUARD_RATIO}x", verdict(ratio <= GUARD_RATIO))
    if turn_start > TURN_START_MS or ratio > GUARD_RATIO:
        raise SystemExit(1)


if __name__ == "__main__":
    asyncio.run(main())
