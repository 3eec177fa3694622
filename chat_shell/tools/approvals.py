""" "Ask first": calls of marked MCP servers or tools wait for the user's decision.

A turn's `TurnApprovals` holds what its conversation marked (server names, or tool names as the
model sees them, `<server>_<tool>`) and one future per waiting call. The tool node announces the
wait (`approval.requested`, a stored event of the turn, so a reload or a reconnect shows it),
awaits the future, and announces the decision. The runtime's `ApprovalDesk` finds the turn's
waits by turn id for `decide`, which the host calls in the same process as the turn. While a
call waits the turn keeps running: it holds its slot, and a stop cancels the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Iterable

from langchain_core.tools import BaseTool

from chat_shell.contracts import TurnEvent
from chat_shell.tools.mcp import server_of


def denied_message(name: str) -> str:
    """What the model sees for a call the user denied."""
    return (
        f"The user denied this call of {name}, so it did not run. Do not call it again for this "
        "request; answer without it, or ask the user what to do instead."
    )


class TurnApprovals:
    def __init__(self, ask_first: Iterable[str] = ()) -> None:
        self._names = frozenset(ask_first)
        self._waiting: dict[str, asyncio.Future[bool]] = {}

    def asks(self, tool: BaseTool) -> bool:
        return tool.name in self._names or server_of(tool) in self._names

    async def wait(self, call_id: str) -> bool:
        """The user's decision on `call_id` (True: allowed)."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting[call_id] = future
        try:
            return await future
        finally:
            self._waiting.pop(call_id, None)

    def decide(self, call_id: str, allow: bool) -> bool:
        future = self._waiting.pop(call_id, None)
        if future is None or future.done():
            return False
        future.set_result(allow)
        return True


class ApprovalDesk:
    """The waits of the turns one runtime runs, by turn id."""

    def __init__(self) -> None:
        self._turns: dict[int, TurnApprovals] = {}

    async def serving(
        self, turn_id: int, approvals: TurnApprovals, events: AsyncGenerator[TurnEvent, None]
    ) -> AsyncGenerator[TurnEvent, None]:
        """The turn's `events`; its waits can be decided while they run."""
        self._turns[turn_id] = approvals
        try:
            async with contextlib.aclosing(events) as turn_events:
                async for event in turn_events:
                    yield event
        finally:
            self._turns.pop(turn_id, None)

    def decide(self, turn_id: int, call_id: str, allow: bool) -> bool:
        approvals = self._turns.get(turn_id)
        return approvals is not None and approvals.decide(call_id, allow)
