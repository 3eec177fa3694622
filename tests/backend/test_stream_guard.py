"""A stream that is ended (its account disabled) sends not one more event, even one that was
already waiting for it when it was ended: disabling an account also stops its turns, whose
`turn.cancelled` can reach the stream's queue in the same moment."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.db import create_engine, session_factory
from backend.services.dashboard import rollups
from backend.services.delivery import streams
from backend.services.delivery.broker import LocalBroker
from backend.services.delivery.event_log import EventWriter, StoredEvent
from backend.services.delivery.relay import Relay
from backend.services.delivery.stream_events import Cancelled
from chat_shell.contracts import TurnStarted
from tests.support.turns import stored_turn


@pytest.fixture
async def sessions(sqlite_url: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    engine = create_engine(sqlite_url)
    yield session_factory(engine)
    await engine.dispose()


async def _signed_in() -> bool:
    return True


async def test_an_ended_stream_sends_no_event_that_was_waiting_for_it(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    started = await stored_turn(sessions)
    broker = LocalBroker()
    writer = EventWriter(sessions, broker.publish, rollups.write_staged)
    writer.start()
    open_streams = streams.OpenStreams(max_per_user=5)
    slot = open_streams.reserve(started.owner_id)
    guard = streams.StreamGuard(slot, _signed_in, check_seconds=60)
    followed = streams.follow(sessions, broker, started.turn_id, 0, log_poll_seconds=30, guard=guard)
    try:
        turn_log = writer.open(started.turn_id)
        Relay(started, turn_log, "m").forward(TurnStarted(model="m", profile="m"))
        await turn_log.drain()
        assert (await anext(followed)).event == "turn.started"

        waiting = asyncio.create_task(anext(followed))
        await asyncio.sleep(0.1)  # the stream waits for its next live event
        assert not waiting.done()
        # In one step, as the disabling does: the turn's end reaches the stream's queue and
        # the stream is ended.
        await broker.publish([StoredEvent.of(started.turn_id, 2, Cancelled(partial=""))])
        open_streams.end_user(started.owner_id)

        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(waiting, timeout=5)
    finally:
        await followed.aclose()
        await writer.stop()
