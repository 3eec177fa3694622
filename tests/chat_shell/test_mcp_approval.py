""" "Ask first" in the runtime, package and service mode: a marked tool's call waits for
`decide`, and a stop ends the wait. A real MCP server over stdio; its `touch` tool marks a file
each time it really runs."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from chat_shell.api.app import create_service_app
from chat_shell.contracts import TERMINAL_EVENT_TYPES, TurnEvent, TurnRuntime
from chat_shell.service_client import RemoteChatShell
from tests.chat_shell.conftest import MakeShell
from tests.support.mcp_servers import stdio_server
from tests.support.scripted_provider import ScriptedProvider, text, tool_call
from tests.support.servers import serve
from tests.support.turns import make_request


def _runs(marks: Path) -> int:
    """How often the tool really ran."""
    return len(marks.read_text().splitlines()) if marks.exists() else 0


async def _until_asked(events: AsyncIterator[TurnEvent]) -> tuple[list[TurnEvent], str]:
    seen: list[TurnEvent] = []
    async for event in events:
        seen.append(event)
        if event.type == "approval.requested":
            return seen, event.call_id
        assert event.type not in TERMINAL_EVENT_TYPES, seen
    raise AssertionError(f"no approval was requested: {seen}")


async def _allowed_turn(runtime: TurnRuntime, marks: Path) -> list[TurnEvent]:
    request = make_request(1, "mark it", ask_first=["ops_touch"])
    async with contextlib.aclosing(runtime.run(request)) as events:
        seen, call_id = await _until_asked(events)
        assert _runs(marks) == 0
        assert await runtime.decide(1, call_id, True)
        assert not await runtime.decide(1, call_id, True)  # decided already
        seen.extend([event async for event in events])
    return seen


async def test_an_allowed_call_runs_once_in_package_and_in_service_mode(
    make_shell: MakeShell, scripted_provider: ScriptedProvider, tmp_path: Path
) -> None:
    shell = make_shell(mcp_servers={"ops": stdio_server()})
    try:
        for number, mode in enumerate(("package", "service"), start=1):
            marks = tmp_path / f"{mode}.txt"
            scripted_provider.script(tool_call("ops_touch", {"path": str(marks)}), text("Marked."))
            if mode == "package":
                events = await _allowed_turn(shell, marks)
            else:
                async with serve(create_service_app(shell)) as url:
                    remote = RemoteChatShell(url)
                    events = await _allowed_turn(remote, marks)
                    await remote.aclose()
            assert events[-1].type == "turn.completed", mode
            decided = [e for e in events if e.type == "approval.decided"]
            assert [e.allowed for e in decided] == [True]  # type: ignore[union-attr]
            assert [e.output for e in events if e.type == "tool.completed"] == ["1 run(s)"]  # type: ignore[union-attr]
            assert _runs(marks) == 1, mode
            block = events[-1].result.blocks[0]  # type: ignore[union-attr]
            assert (block.type, block.approval) == ("tool", "allowed")
            assert len(scripted_provider.chat_requests) == 2 * number
    finally:
        await shell.aclose()


async def test_a_stop_ends_a_turn_that_waits_for_a_decision(
    make_shell: MakeShell, scripted_provider: ScriptedProvider, tmp_path: Path
) -> None:
    shell = make_shell(mcp_servers={"ops": stdio_server()})
    marks = tmp_path / "marks.txt"
    scripted_provider.script(tool_call("ops_touch", {"path": str(marks)}), text("never"))
    cancel = asyncio.Event()
    try:
        request = make_request(1, "mark it", ask_first=["ops"])
        async with contextlib.aclosing(shell.run(request, cancel)) as events:
            _, call_id = await _until_asked(events)
            cancel.set()
            rest = [event async for event in events]
        assert rest[-1].type == "turn.cancelled"
        assert not await shell.decide(1, call_id, True)  # nothing waits any more
        assert _runs(marks) == 0
        block = rest[-1].result.blocks[0]  # type: ignore[union-attr]
        assert (block.status, block.approval) == ("error", "pending")
    finally:
        await shell.aclose()
