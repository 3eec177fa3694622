"""A turn that fails outside the runtime (the runtime raised or ended without a result) ends
with exactly what its stream showed: the relay folds the events it relayed with the one fold."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.db import create_engine, session_factory
from backend.models import Message
from backend.services.dashboard import rollups
from backend.services.delivery.broker import LocalBroker
from backend.services.delivery.event_log import EventWriter, read_events
from backend.services.delivery.relay import Relay
from backend.services.delivery.stream_events import visible
from chat_shell.contracts import MessageDelta, ToolCompleted, ToolStarted, TurnStarted
from chat_shell.events.fold import VISIBLE_EVENT_TYPES, fold
from tests.support.turns import stored_turn


@pytest.fixture
async def sessions(sqlite_url: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    engine = create_engine(sqlite_url)
    yield session_factory(engine)
    await engine.dispose()


async def test_a_turn_failing_outside_the_runtime_keeps_the_text_and_blocks_it_streamed(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    started = await stored_turn(sessions, "read it")
    broker = LocalBroker()
    writer = EventWriter(sessions, broker.publish, rollups.write_staged)
    writer.start()
    try:
        turn_log = writer.open(started.turn_id)
        relay = Relay(started, turn_log, "m")
        for event in (
            TurnStarted(model="m", profile="m"),
            MessageDelta(text="Reading "),
            MessageDelta(text="the file. "),
            ToolStarted(call_id="c1", name="read_attachment", args={"attachment_id": 1}),
            ToolCompleted(call_id="c1", name="read_attachment", output="Budget: 50,000 yen."),
            MessageDelta(text="\n\nThe budget is"),
            ToolStarted(call_id="c2", name="read_attachment", args={"attachment_id": 2}),
        ):
            relay.forward(event)
        relay.fail("internal_error", "the turn could not run: RuntimeError")
        await turn_log.drain()
    finally:
        await writer.stop()

    async with sessions() as db:
        logged = await read_events(db, started.turn_id, 0)
        message = await db.get_one(Message, started.assistant_message.id)
    streamed = "".join(e.data["text"] for e in logged if e.event == "message.delta")
    assert streamed == "Reading the file. \n\nThe budget is"
    ending = logged[-1]
    assert ending.event == "turn.failed" and ending.data["partial"] == streamed
    assert message.status == "failed" and message.result is not None
    assert message.result["value"] == streamed
    seen = fold(visible(e.event, e.data) for e in logged if e.event in VISIBLE_EVENT_TYPES)
    seen.end()
    assert message.result["blocks"] == [b.model_dump(mode="json", exclude_none=True) for b in seen.blocks]
    # The tool that never returned is shown as stopped, not as still running.
    assert [b.get("status") for b in message.result["blocks"] if b["type"] == "tool"] == [
        "completed",
        "error",
    ]
