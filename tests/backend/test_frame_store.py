"""Text frames go to the database on the driver itself (`FrameStore`): the rows are the ones the
ORM path writes, a failed batch stores nothing of itself and the next batch still lands, and
on SQLite a frame queues behind the process's other writers instead of sleeping in SQLite's
busy handler."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.db import create_engine, session_factory, transaction
from backend.models import TurnEvent
from backend.services.delivery.event_log import StoredEvent, read_events
from backend.services.delivery.frame_store import FrameStore
from tests.support.turns import stored_turn

DATA = {"text": 'Grüße, 世界 "quoted"\n', "n": [1, 2.5, None, True]}
DELTA = "message.delta"


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url, sqlite_busy_timeout=5)
    yield engine
    await engine.dispose()


async def _turn(engine: AsyncEngine) -> int:
    return (await stored_turn(session_factory(engine))).turn_id


async def _stored(engine: AsyncEngine, turn_id: int) -> list[StoredEvent]:
    async with session_factory(engine)() as db:
        return await read_events(db, turn_id, 0)


async def test_a_frame_is_the_row_the_orm_path_writes(engine: AsyncEngine) -> None:
    one, two = await _turn(engine), await _turn(engine)
    frames = FrameStore(engine)
    try:
        await frames.write([(one, 1, DELTA, DATA)])
        await frames.write([(one, 2, DELTA, {"text": "b"}), (two, 1, DELTA, {"text": "c"})])
    finally:
        await frames.release()
    async with transaction(session_factory(engine)) as db:
        await db.execute(
            insert(TurnEvent.__table__), {"turn_id": two, "seq": 2, "event": DELTA, "data": DATA}
        )
        rows = (await db.scalars(select(TurnEvent).order_by(TurnEvent.id))).all()
    assert [(r.turn_id, r.seq, r.data) for r in rows] == [
        (one, 1, DATA),
        (one, 2, {"text": "b"}),
        (two, 1, {"text": "c"}),
        (two, 2, DATA),
    ]
    assert all(r.created_at.tzinfo is not None for r in rows)
    assert rows[0].created_at <= rows[3].created_at
    assert [e.data for e in await _stored(engine, one)] == [DATA, {"text": "b"}]


async def test_a_failed_batch_stores_none_of_its_rows_and_the_next_batch_lands(engine: AsyncEngine) -> None:
    turn_id = await _turn(engine)
    frames = FrameStore(engine)
    try:
        await frames.write([(turn_id, 1, DELTA, {"text": "a"})])
        with pytest.raises(Exception, match=r"(?i)unique"):  # seq 1 again, after a new seq 2
            await frames.write([(turn_id, 2, DELTA, {"text": "b"}), (turn_id, 1, DELTA, {})])
        await frames.write([(turn_id, 2, DELTA, {"text": "c"})])
    finally:
        await frames.release()
    stored = [(e.seq, e.data) for e in await _stored(engine, turn_id)]
    assert stored == [(1, {"text": "a"}), (2, {"text": "c"})]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_on_sqlite_a_frame_takes_its_turn_at_the_write_gate(engine: AsyncEngine) -> None:
    """A transaction holds the write lock; a frame, then another transaction, ask to write.
    The frame must land before the later transaction: a frame that skipped the gate would sleep
    in SQLite's busy handler while the later writer, let through the gate, went first."""
    turn_id = await _turn(engine)
    sessions = session_factory(engine)
    frames = FrameStore(engine)
    first_writing = asyncio.Event()

    async def transaction_writing(seq: int, hold: float) -> None:
        async with transaction(sessions) as db:
            row = {"turn_id": turn_id, "seq": seq, "event": DELTA, "data": {"by": "orm"}}
            await db.execute(insert(TurnEvent.__table__), row)
            first_writing.set()
            await asyncio.sleep(hold)

    try:
        first = asyncio.create_task(transaction_writing(1, 0.3))
        await first_writing.wait()
        frame = asyncio.create_task(frames.write([(turn_id, 2, DELTA, {"by": "frame"})]))
        await asyncio.sleep(0.05)
        later = asyncio.create_task(transaction_writing(3, 0))
        await asyncio.gather(first, frame, later)
    finally:
        await frames.release()
    async with sessions() as db:
        landed = (await db.scalars(select(TurnEvent.data).order_by(TurnEvent.id))).all()
    assert landed == [{"by": "orm"}, {"by": "frame"}, {"by": "orm"}]
