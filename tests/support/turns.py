"""Helpers to build turn requests and read a runtime's events in tests."""

from __future__ import annotations

from typing import Any

from chat_shell.contracts import (
    TERMINAL_EVENT_TYPES,
    ChainMessage,
    TurnEvent,
    TurnRequest,
    TurnRuntime,
    UserInput,
)


def make_request(
    turn_id: int = 1,
    content: str = "hello",
    *,
    history: list[ChainMessage] | None = None,
    conversation_id: int = 1,
    **overrides: Any,
) -> TurnRequest:
    """A request whose user message_id is `2*turn_id-1` and assistant message_id `2*turn_id`."""
    return TurnRequest(
        conversation_id=conversation_id,
        owner_id=1,
        turn_id=turn_id,
        assistant_message_id=turn_id * 2,
        user=UserInput(message_id=turn_id * 2 - 1, content=content),
        history=[] if history is None else history,
        **overrides,
    )


async def collect(runner: TurnRuntime, request: TurnRequest, **kwargs: Any) -> list[TurnEvent]:
    """All events of one turn, checking the envelope: started first, one terminal event last."""
    events = [event async for event in runner.run(request, **kwargs)]
    assert events[0].type == "turn.started", events[0]
    assert [e.type in TERMINAL_EVENT_TYPES for e in events].count(True) == 1
    assert events[-1].type in TERMINAL_EVENT_TYPES
    return events


def deltas(events: list[TurnEvent]) -> str:
    return "".join(e.text for e in events if e.type == "message.delta")  # type: ignore[union-attr]
