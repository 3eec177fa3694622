"""Helpers to build turn requests and read a runtime's events in tests, and a running turn stored
in the database for the tests of the delivery pieces below the API (the relay, the event log)."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.db import transaction
from backend.services.accounts import auth
from backend.services.conversations import conversations
from backend.services.delivery import turns
from backend.services.model_catalog import ModelCatalog
from chat_shell.contracts import (
    TERMINAL_EVENT_TYPES,
    ChainMessage,
    TurnEvent,
    TurnRequest,
    TurnRuntime,
    UserInput,
)
from tests.support.api import PASSWORD


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


async def stored_turn(sessions: async_sessionmaker[AsyncSession], content: str = "go") -> turns.StartedTurn:
    """A new user's new conversation with a running turn of model `m`."""
    async with transaction(sessions) as db:
        user = await auth.create_user(db, auth.Passwords("CHEAPEST"), uuid.uuid4().hex[:12], PASSWORD)
        conversation = await conversations.create(db, user, "delivery", None, ModelCatalog("m", {}))
        return await turns.start_turn(db, user, conversation, content, [], "m")
