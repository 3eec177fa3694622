"""The durable, ordered event log of turns (SPEC 6.3).

Events are numbered per turn (seq 1, 2, ... without gaps) and committed to `turn_events`
before anyone sees them. One writer task per process commits every pending event of every
turn in a single transaction (group commit): at low load an event is written the moment it
arrives; under load, the events that queued during one commit go out together in the next.
Text deltas that queue up behind a commit are merged before they are numbered, so a numbered
event is never merged or split afterwards and replay reproduces the text exactly.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.models import TurnEvent

log = logging.getLogger(__name__)

DELTA = "message.delta"
# A batch that finds SQLite locked past its busy timeout is written again this many times.
LOCKED_ATTEMPTS = 5
LOCKED_BACKOFF_SECONDS = 0.5


@dataclass(frozen=True)
class StoredEvent:
    turn_id: int
    seq: int
    event: str
    data: dict[str, Any]

    @property
    def sse_id(self) -> str:
        return f"{self.turn_id}:{self.seq}"


# Called inside the commit's transaction with the events being written (terminal events carry
# the turn's result, which must land in the same transaction as the event that announces it).
CommitHook = Callable[[AsyncSession, Sequence[StoredEvent]], Awaitable[None]]


@dataclass
class _Pending:
    event: str
    data: dict[str, Any]
    hook: CommitHook | None


class TurnLog:
    """The writer side of one turn's log. `append` never blocks on the database."""

    def __init__(self, writer: EventWriter, turn_id: int, last_seq: int = 0) -> None:
        self._writer = writer
        self.turn_id = turn_id
        self.last_seq = last_seq
        self._pending: list[_Pending] = []
        self._in_flight = False
        self._idle = asyncio.Event()
        self._idle.set()
        self._error: BaseException | None = None

    def append(self, event: str, data: dict[str, Any], hook: CommitHook | None = None) -> None:
        if self._error is not None:
            raise self._error
        last = self._pending[-1] if self._pending else None
        if event == DELTA and last is not None and last.event == DELTA:
            last.data = {"text": last.data["text"] + data["text"]}
        else:
            self._pending.append(_Pending(event, dict(data), hook))
        self._idle.clear()
        if not self._in_flight:
            self._submit()

    def _submit(self) -> None:
        batch, self._pending = self._pending, []
        events = []
        for item in batch:
            self.last_seq += 1
            events.append((StoredEvent(self.turn_id, self.last_seq, item.event, item.data), item.hook))
        self._in_flight = True
        self._writer.enqueue(self, events)

    def committed(self, error: BaseException | None) -> None:
        self._in_flight = False
        if error is not None:
            self._error = error
        if self._pending and self._error is None:
            self._submit()
        elif not self._pending or self._error is not None:
            self._idle.set()

    async def drain(self) -> None:
        """Waits until everything appended so far is committed (and published)."""
        await self._idle.wait()
        if self._error is not None:
            raise self._error


Publish = Callable[[Sequence[StoredEvent]], Awaitable[None]]


# A turn's events waiting for the next group commit, each with what commits beside it.
QueuedEvents = tuple[TurnLog, list[tuple[StoredEvent, CommitHook | None]]]


class EventWriter:
    """The process-wide group-commit writer behind every `TurnLog`."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], publish: Publish) -> None:
        self._sessions = sessions
        self._publish = publish
        self._queue: list[QueuedEvents] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="event-writer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def open(self, turn_id: int, last_seq: int = 0) -> TurnLog:
        return TurnLog(self, turn_id, last_seq)

    def enqueue(self, turn_log: TurnLog, events: list[tuple[StoredEvent, CommitHook | None]]) -> None:
        self._queue.append((turn_log, events))
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._queue = self._queue, []
            if batch:
                await self._commit(batch)

    async def _write(self, batch: list[QueuedEvents], events: list[StoredEvent]) -> None:
        async with self._sessions() as db, db.begin():
            await db.execute(
                insert(TurnEvent),
                [{"turn_id": e.turn_id, "seq": e.seq, "event": e.event, "data": e.data} for e in events],
            )
            for _, items in batch:
                for event, hook in items:
                    if hook is not None:
                        await hook(db, [event])

    async def _commit(self, batch: list[QueuedEvents]) -> None:
        events = [event for _, items in batch for event, _ in items]
        error: BaseException | None = None
        for attempt in range(1, LOCKED_ATTEMPTS + 1):
            try:
                await self._write(batch, events)
                break
            except Exception as exc:
                if attempt < LOCKED_ATTEMPTS and _is_locked(exc):
                    # SQLite's single write lock, held past the busy timeout by a burst of other
                    # writers: the events are still here, so wait and write them, not lose them.
                    log.warning("event log found the database locked (attempt %d), retrying", attempt)
                    await asyncio.sleep(LOCKED_BACKOFF_SECONDS * attempt)
                    continue
                # The turns in this batch stop; others keep going.
                log.exception("event log commit failed for turns %s", sorted({e.turn_id for e in events}))
                error = exc
                break
        if error is None:
            try:
                await self._publish(events)
            except Exception:  # the log is durable; subscribers catch up from it
                log.exception("publishing turn events failed")
        for turn_log, _ in batch:
            turn_log.committed(error)


async def latest_seq(db: AsyncSession, turn_id: int) -> int:
    """The seq of the turn's newest committed event (0 before the first)."""
    return (
        await db.scalar(select(func.coalesce(func.max(TurnEvent.seq), 0)).where(TurnEvent.turn_id == turn_id))
        or 0
    )


async def read_events(db: AsyncSession, turn_id: int, after_seq: int, limit: int = 1000) -> list[StoredEvent]:
    rows = await db.execute(
        select(TurnEvent.seq, TurnEvent.event, TurnEvent.data)
        .where(TurnEvent.turn_id == turn_id, TurnEvent.seq > after_seq)
        .order_by(TurnEvent.seq)
        .limit(limit)
    )
    return [StoredEvent(turn_id, seq, event, data) for seq, event, data in rows]


def _is_locked(exc: Exception) -> bool:
    return isinstance(exc, OperationalError) and "database is locked" in str(exc.orig)
