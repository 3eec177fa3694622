"""Resumable event streams: exactly the events a client missed, then the live ones.

A listener subscribes to the broker first, then reads the durable log after its last seq, then
takes live events while they are contiguous. A gap (lag, a missed message, a degraded broker)
sends it back to the log; nothing is skipped and nothing is sent twice. Finished turns whose
log was pruned are replayed from the stored message under the turn's ids. A stream whose
credential stops holding (account disabled, session logged out, token revoked) closes early:
its `StreamGuard`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime

import anyio
from pydantic import TypeAdapter
from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.models import Message, Turn, TurnEvent, TurnStatus
from backend.models.base import MAX_BIG_ID, MAX_INT, utcnow
from backend.schemas.conversations import StoredMessage
from backend.services.decimals import ascii_decimal
from backend.services.delivery.broker import LocalBroker, Subscription
from backend.services.delivery.event_log import StoredEvent, latest_seq, read_events
from backend.services.delivery.stream_events import (
    Cancelled,
    Completed,
    Failed,
    Metrics,
    Started,
    StreamPayload,
    relayed,
)
from backend.services.errors import Malformed, NotFound, RateLimited, Unavailable
from chat_shell.contracts import TERMINAL_EVENT_TYPES, Block
from chat_shell.events.fold import replay

_BLOCKS: TypeAdapter[list[Block]] = TypeAdapter(list[Block])
PAGE = 1000
DEGRADED_WAIT_SECONDS = 0.25
# The last event of a stream whose process shuts down: reconnect (to another replica) after
# RECONNECT_MS, with Last-Event-ID as always. The stream has this long to send it.
RECONNECT = "stream.reconnect"
RECONNECT_MS = 100
SHUTDOWN_GRACE_SECONDS = 2.0
# A turn refused because this process's streams are full is asked again after this long.
STREAMS_FULL_RETRY_SECONDS = 3


class StreamSlot:
    """One open stream of a user; `release` (idempotent) gives the slot back. `ended` is set
    when the stream must close before its turn ends (its account was disabled)."""

    def __init__(self, slots: dict[int, set[StreamSlot]], user_id: int) -> None:
        self._slots = slots
        self._user_id = user_id
        self.ended = asyncio.Event()
        slots.setdefault(user_id, set()).add(self)

    def release(self) -> None:
        held = self._slots.get(self._user_id)
        if held is not None and self in held:
            held.discard(self)
            if not held:
                del self._slots[self._user_id]


class OpenStreams:
    """Streams open at once per user, in this process (each backend replica counts its own),
    and in all: past `capacity` this process admits no new turn (`require_room`)."""

    def __init__(self, max_per_user: int, capacity: int | None = None) -> None:
        self._max = max_per_user
        self._capacity = capacity
        self._slots: dict[int, set[StreamSlot]] = {}

    @property
    def total(self) -> int:
        return sum(len(held) for held in self._slots.values())

    def require_room(self) -> None:
        """Admission of a new turn by this web process: its streams keep their pace."""
        if self._capacity is not None and self.total >= self._capacity:
            raise Unavailable(
                "at_capacity",
                f"This server relays as many replies as it can at once ({self.total}); yours is sent "
                "in a few seconds.",
                retry_after=STREAMS_FULL_RETRY_SECONDS,
            )

    def reserve(self, user_id: int) -> StreamSlot:
        if len(self._slots.get(user_id, ())) >= self._max:
            raise RateLimited(
                "too_many_streams",
                f"{self._max} streams are open for you at once, the limit; close a tab or wait",
                retry_after=5,
            )
        return StreamSlot(self._slots, user_id)

    def end_user(self, user_id: int) -> None:
        """Closes every stream of `user_id` open in this process, at once."""
        for slot in list(self._slots.get(user_id, ())):
            slot.ended.set()


class StreamGuard:
    """Whether a stream may go on: not once its slot is ended (here, at once) nor once, asked
    every `check_seconds`, `still_signed_in` says its credential no longer holds (an account
    disabled, a session logged out or a token revoked from another process)."""

    def __init__(
        self, slot: StreamSlot, still_signed_in: Callable[[], Awaitable[bool]], check_seconds: float
    ) -> None:
        self.ended = slot.ended
        self._still_signed_in = still_signed_in
        self._check_seconds = check_seconds
        self._next_check = asyncio.get_running_loop().time() + check_seconds

    async def holds(self) -> bool:
        if self.ended.is_set():
            return False
        now = asyncio.get_running_loop().time()
        if now < self._next_check:
            return True
        self._next_check = now + self._check_seconds
        return await self._still_signed_in()


@dataclass(frozen=True)
class Resume:
    turn_id: int
    after_seq: int


def parse_last_event_id(value: str) -> Resume:
    turn, sep, seq = value.partition(":")
    turn_id = ascii_decimal(turn, minimum=1, maximum=MAX_BIG_ID)
    after_seq = ascii_decimal(seq, maximum=MAX_INT)
    if not sep or turn_id is None or after_seq is None:
        raise Malformed("invalid_last_event_id", "Last-Event-ID must look like '<turn_id>:<seq>'")
    return Resume(turn_id, after_seq)


async def choose_turn(
    db: AsyncSession, conversation_id: int, resume: Resume | None, turn_id: int | None
) -> Turn | None:
    """The turn a stream follows: the one named, else the running one, else the latest."""
    wanted = resume.turn_id if resume is not None else turn_id
    if wanted is not None:
        turn = await db.get(Turn, wanted)
        if turn is None or turn.conversation_id != conversation_id:
            raise NotFound("turn not found in this conversation")
        return turn
    return await db.scalar(
        select(Turn)
        .where(Turn.conversation_id == conversation_id)
        .order_by((Turn.status == TurnStatus.RUNNING).desc(), Turn.id.desc())
        .limit(1)
    )


async def check_position(db: AsyncSession, turn: Turn, after_seq: int) -> None:
    """A client cannot have seen an event that was never committed."""
    newest = turn.last_seq if turn.status != TurnStatus.RUNNING else await latest_seq(db, turn.id)
    if after_seq > newest:
        raise Malformed(
            "invalid_last_event_id", f"event {turn.id}:{after_seq} is ahead of the turn's log ({newest})"
        )


def is_done(turn: Turn, after_seq: int) -> bool:
    """The client already has the whole finished turn (nothing to send)."""
    return turn.status != TurnStatus.RUNNING and after_seq >= turn.last_seq


async def follow(
    sessions: async_sessionmaker[AsyncSession],
    broker: LocalBroker,
    turn_id: int,
    after_seq: int,
    log_poll_seconds: float,
    guard: StreamGuard | None = None,
) -> AsyncIterator[StoredEvent]:
    """`log_poll_seconds`: how long it waits for a live event before it re-reads the log.
    `guard`: the stream ends, without an ending event, once it no longer holds (asked before
    each event and at each wait; its `ended` wakes a waiting stream at once)."""
    last = after_seq
    live = False  # taking live events from the broker, or (at first, after a gap) the log
    async with broker.subscribe(turn_id) as subscription, _woken_by(guard, subscription):
        while True:
            if live:
                wait = DEGRADED_WAIT_SECONDS if subscription.degraded else log_poll_seconds
                event = await subscription.next(wait)
                if event is None or event.seq > last + 1:
                    live = False  # re-read the durable log
                    continue
                if event.seq <= last:
                    continue
                events = [event]
            else:
                if guard is not None and not await guard.holds():
                    return
                async with sessions() as db:
                    events = await read_events(db, turn_id, last, PAGE)
                    turn = await db.get(Turn, turn_id)
                    if not events and turn is not None and turn.events_pruned_at is not None:
                        events = await synthesize(db, turn, last)
            for event in events:
                # Asked before each event: once a stream is ended (an account disabled), not one
                # more event goes out, even one already waiting (the turn's own end, as it stops).
                if guard is not None and not await guard.holds():
                    return
                yield event
                last = event.seq
                if event.event in TERMINAL_EVENT_TYPES:
                    return
            if not live:
                if len(events) == PAGE:
                    continue
                if turn is None or (turn.status != TurnStatus.RUNNING and last >= turn.last_seq):
                    return
                live = True


@asynccontextmanager
async def ended_by(stopping: anyio.Event, slot: StreamSlot) -> AsyncIterator[None]:
    """While a stream runs: its process stopping ends it (its slot), as a disabled account does."""

    async def end() -> None:
        await stopping.wait()
        slot.ended.set()

    watcher = asyncio.create_task(end())
    try:
        yield
    finally:
        watcher.cancel()


@asynccontextmanager
async def _woken_by(guard: StreamGuard | None, subscription: Subscription) -> AsyncIterator[None]:
    """While the stream runs: its guard's `ended` interrupts the subscription's wait."""
    if guard is None:
        yield
        return

    async def interrupt() -> None:
        await guard.ended.wait()
        subscription.interrupt()

    waker = asyncio.create_task(interrupt())
    try:
        yield
    finally:
        waker.cancel()


async def synthesize(db: AsyncSession, turn: Turn, after_seq: int) -> list[StoredEvent]:
    """Replay of a finished turn whose log was pruned, built from the stored message.

    The terminal event keeps its original id (`last_seq`); a full replay (after 0) also gets the
    events that fold back into the stored blocks (`replay`) and the final metrics under ids
    below it. A client in the middle of the turn receives the terminal event, which carries the
    complete message.
    """
    message = await db.get(Message, turn.assistant_message_pk)
    if message is None or after_seq >= turn.last_seq:
        return []
    result = message.result or {}
    body: list[StreamPayload] = []
    if after_seq == 0:
        body.append(Started(turn_id=turn.id, message_id=message.message_id, synthesized=True))
        body.extend(relayed(event) for event in replay(_BLOCKS.validate_python(result.get("blocks") or [])))
        if result.get("context_metrics"):
            body.append(Metrics.model_validate(result["context_metrics"]))
        body = body[: max(0, turn.last_seq - 1)]
    events = [StoredEvent.of(turn.id, seq, payload) for seq, payload in enumerate(body, start=1)]
    events.append(StoredEvent.of(turn.id, turn.last_seq, _ending(turn, message)))
    return events


def _ending(turn: Turn, message: Message) -> StreamPayload:
    """The terminal event of a finished turn, as it was sent when the turn ended."""
    result = message.result or {}
    partial = str(result.get("value") or "")
    if turn.status == TurnStatus.COMPLETED:
        return Completed(message=StoredMessage.model_validate(message))
    if turn.status == TurnStatus.CANCELLED:
        return Cancelled(partial=partial)
    error = result.get("error") or {"code": turn.error_code or "failed", "message": turn.error_message or ""}
    return Failed(code=error["code"], message=error["message"], partial=partial)


async def prune_finished(db: AsyncSession, finished_before: datetime) -> int:
    """Drops the event rows of turns finished before the cutoff; their replay is synthesized."""
    turn_ids = list(
        await db.scalars(
            select(Turn.id).where(
                Turn.status != TurnStatus.RUNNING,
                Turn.ended_at < finished_before,
                Turn.events_pruned_at.is_(None),
            )
        )
    )
    if turn_ids:
        await db.execute(delete(TurnEvent).where(TurnEvent.turn_id.in_(turn_ids)))
        await db.execute(update(Turn).where(Turn.id.in_(turn_ids)).values(events_pruned_at=utcnow()))
    return len(turn_ids)
