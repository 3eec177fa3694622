"""The durable, ordered event log of turns (SPEC 6.3).

Events are numbered per turn (seq 1, 2, ... without gaps) and committed to `turn_events`
before anyone sees them. One writer task per process commits every pending event of every
turn in a single transaction (group commit): at low load an event is written the moment it
arrives; under load, the events that queued during one commit go out together in the next.

Text comes in frames: a turn sends at most one `message.delta` per `FRAME_SECONDS` on average
(a token bucket that holds `FRAME_BURST` frames), so a fast stream's log, broker and streams
work once per frame, not once per token. Text goes out the moment it arrives while the bucket
holds a frame; otherwise it waits for the next one, with whatever text follows. At a typical
50 tokens/s nothing waits: a token that arrives early (network and scheduling jitter) uses the
bucket's reserve instead of waiting out a fixed window. Text that queues up behind a commit is
merged the same way. Frames are made before they are numbered, so a
numbered event is never merged or split afterwards and replay reproduces the text exactly.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table, func, insert, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.models import TurnEvent
from backend.services.delivery.batch_worker import BatchWorker
from backend.services.delivery.frame_store import FrameStore
from backend.services.delivery.stream_events import Delta, StreamPayload

log = logging.getLogger(__name__)

# A turn's text goes out at most once per this many seconds on average; a fast stream gets
# ~20 ms frames. FRAME_BURST frames may go out back to back after a slower spell.
FRAME_SECONDS = 0.02
FRAME_BURST = 3
# A batch that finds SQLite locked past its busy timeout is written again this many times.
LOCKED_ATTEMPTS = 5
LOCKED_BACKOFF_SECONDS = 0.5
_INSERT = insert(cast(Table, TurnEvent.__table__))  # a declarative class's table; typed as FromClause


@dataclass(frozen=True)
class StoredEvent:
    """One numbered event as the log stores it and the stream sends it (`event:`, `data:`)."""

    turn_id: int
    seq: int
    event: str
    data: dict[str, Any]

    @classmethod
    def of(cls, turn_id: int, seq: int, payload: StreamPayload) -> StoredEvent:
        return cls(turn_id, seq, payload.event, payload.data())

    @property
    def sse_id(self) -> str:
        return f"{self.turn_id}:{self.seq}"


# Called inside the commit's transaction with the events being written (terminal events carry
# the turn's result, which must land in the same transaction as the event that announces it).
CommitHook = Callable[[AsyncSession, Sequence[StoredEvent]], Awaitable[None]]
# Called once per commit, after every event's hook, in the same transaction.
FinishCommit = Callable[[AsyncSession], Awaitable[None]]


@dataclass
class _Pending:
    payload: StreamPayload
    hook: CommitHook | None


class LogWriteFailed(Exception):
    """A commit of this turn's events failed: nothing more can be appended to its log."""


class TurnLog:
    """The writer side of one turn's log. `append` never blocks on the database.

    Once a commit of its events fails, the log is broken: `on_error` is called (the turn's job
    stops) and every later `append` and `drain` raises `LogWriteFailed`.
    """

    def __init__(
        self, writer: EventWriter, turn_id: int, last_seq: int = 0, on_error: Callable[[], None] | None = None
    ) -> None:
        self._writer = writer
        self.turn_id = turn_id
        self.last_seq = last_seq
        self._on_error = on_error
        self._pending: list[_Pending] = []
        self._in_flight = False
        self._idle = asyncio.Event()
        self._idle.set()
        self._error: LogWriteFailed | None = None
        # The text of the frame being gathered; the frame bucket (frames it holds, when it was
        # last filled up); the timer that sends the gathered text when the bucket has a frame.
        self._frame: list[str] = []
        self._frames_held = float(FRAME_BURST)
        self._filled_at = 0.0
        self._waiting: asyncio.TimerHandle | None = None

    @property
    def broken(self) -> bool:
        return self._error is not None

    def append_text(self, text: str) -> None:
        """A piece of the reply's text: sent at once while the frame bucket holds a frame, else
        with the next frame."""
        if self._error is not None:
            raise self._error
        self._frame.append(text)
        self._idle.clear()
        if self._waiting is None:
            self._send_frame_or_wait()

    def append(self, payload: StreamPayload, hook: CommitHook | None = None) -> None:
        if self._error is not None:
            raise self._error
        self._flush_frame()  # the text before this event goes out before it
        self._queue(payload, hook)

    def _send_frame_or_wait(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        held = min(FRAME_BURST, self._frames_held + (now - self._filled_at) / FRAME_SECONDS)
        self._filled_at = now
        if held >= 1:
            self._frames_held = held - 1
            self._flush_frame()
        else:
            self._frames_held = held
            self._waiting = loop.call_later((1 - held) * FRAME_SECONDS, self._frame_due)

    def _frame_due(self) -> None:
        self._waiting = None
        if self._frame and self._error is None:
            self._send_frame_or_wait()

    def _flush_frame(self) -> None:
        if self._frame:
            text, self._frame = "".join(self._frame), []
            self._queue(Delta(text=text), None)

    def _queue(self, payload: StreamPayload, hook: CommitHook | None) -> None:
        last = self._pending[-1] if self._pending else None
        if isinstance(payload, Delta) and last is not None and isinstance(last.payload, Delta):
            last.payload = Delta(text=last.payload.text + payload.text)
        else:
            self._pending.append(_Pending(payload, hook))
        self._idle.clear()
        if not self._in_flight:
            self._submit()

    def _submit(self) -> None:
        batch, self._pending = self._pending, []
        events = []
        for item in batch:
            self.last_seq += 1
            events.append((StoredEvent.of(self.turn_id, self.last_seq, item.payload), item.hook))
        self._in_flight = True
        self._writer.enqueue(self, events)

    def committed(self, error: BaseException | None) -> None:
        self._in_flight = False
        if error is not None and self._error is None:
            self._error = LogWriteFailed(f"turn {self.turn_id}: its events could not be stored")
            self._error.__cause__ = error
            self._pending.clear()
            self._frame.clear()
            if self._on_error is not None:
                self._on_error()
        if self._pending:
            self._submit()
        else:
            self._idle.set()

    async def drain(self) -> None:
        """Waits until everything appended so far is committed (and published)."""
        if self._error is None:
            self._flush_frame()
        await self._idle.wait()
        if self._error is not None:
            raise self._error


Publish = Callable[[Sequence[StoredEvent]], Awaitable[None]]


# A turn's events waiting for the next group commit, each with what commits beside it.
QueuedEvents = tuple[TurnLog, list[tuple[StoredEvent, CommitHook | None]]]


class EventWriter:
    """The process-wide group-commit writer behind every `TurnLog`.

    `finish_commit` ends each commit's transaction: the dashboard's rollups write what the
    hooks staged there, merged and in one key order (`rollups.write_staged`).
    """

    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], publish: Publish, finish_commit: FinishCommit
    ) -> None:
        self._sessions = sessions
        # Text frames, most of the commits, go straight to the driver on a held connection.
        self._frames = FrameStore(sessions.kw["bind"])
        self._publish = publish
        self._finish_commit = finish_commit
        self._worker: BatchWorker[QueuedEvents] = BatchWorker("event-writer", self._commit)

    def start(self) -> None:
        self._worker.start()

    async def stop(self) -> None:
        await self._worker.stop()
        await self._frames.release()

    def open(self, turn_id: int, last_seq: int = 0, on_error: Callable[[], None] | None = None) -> TurnLog:
        return TurnLog(self, turn_id, last_seq, on_error)

    def enqueue(self, turn_log: TurnLog, events: list[tuple[StoredEvent, CommitHook | None]]) -> None:
        self._worker.add([(turn_log, events)])

    async def _write(self, batch: list[QueuedEvents], events: list[StoredEvent]) -> None:
        hooked = [(event, hook) for _, items in batch for event, hook in items if hook is not None]
        if not hooked:
            # Text frames, the most commits: nothing stages rollups, so no ORM session is needed.
            await self._frames.write([(e.turn_id, e.seq, e.event, e.data) for e in events])
            return
        # A Core insert of the table (the ORM's bulk path costs more than the row), one row
        # without executemany.
        rows = [{"turn_id": e.turn_id, "seq": e.seq, "event": e.event, "data": e.data} for e in events]
        async with self._sessions() as db, db.begin():
            await db.execute(_INSERT, rows[0] if len(rows) == 1 else rows)
            for event, hook in hooked:
                await hook(db, [event])
            await self._finish_commit(db)

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
    """SQLite's write lock held past the busy timeout, through SQLAlchemy or the driver itself."""
    cause = exc.orig if isinstance(exc, OperationalError) else exc
    return isinstance(cause, sqlite3.OperationalError) and "database is locked" in str(cause)
