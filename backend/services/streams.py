"""Resumable event streams: exactly the events a client missed, then the live ones.

A listener subscribes to the broker first, then reads the durable log after its last seq, then
takes live events while they are contiguous. A gap (lag, a missed message, a degraded broker)
sends it back to the log; nothing is skipped and nothing is sent twice. Finished turns whose
log was pruned are replayed from the stored message under the turn's ids.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.api.errors import ApiError
from backend.models import Message, Turn, TurnEvent, TurnStatus
from backend.models.base import utcnow
from backend.services.broker import LocalBroker
from backend.services.event_log import StoredEvent, latest_seq, read_events
from backend.services.turns import message_payload

TERMINAL_EVENTS = frozenset({"turn.completed", "turn.failed", "turn.cancelled"})
PAGE = 1000
LIVE_WAIT_SECONDS = 1.0
DEGRADED_WAIT_SECONDS = 0.25


@dataclass(frozen=True)
class Resume:
    turn_id: int
    after_seq: int


def parse_last_event_id(value: str) -> Resume:
    turn, sep, seq = value.partition(":")
    if not sep or not turn.isdigit() or not seq.isdigit():
        raise ApiError(400, "invalid_last_event_id", "Last-Event-ID must look like '<turn_id>:<seq>'")
    return Resume(int(turn), int(seq))


async def choose_turn(
    db: AsyncSession, conversation_id: int, resume: Resume | None, turn_id: int | None
) -> Turn | None:
    """The turn a stream follows: the one named, else the running one, else the latest."""
    wanted = resume.turn_id if resume is not None else turn_id
    if wanted is not None:
        turn = await db.get(Turn, wanted)
        if turn is None or turn.conversation_id != conversation_id:
            raise ApiError(404, "not_found", "turn not found in this conversation")
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
        raise ApiError(
            400, "invalid_last_event_id", f"event {turn.id}:{after_seq} is ahead of the turn's log ({newest})"
        )


def is_done(turn: Turn, after_seq: int) -> bool:
    """The client already has the whole finished turn (nothing to send)."""
    return turn.status != TurnStatus.RUNNING and after_seq >= turn.last_seq


async def follow(
    sessions: async_sessionmaker[AsyncSession], broker: LocalBroker, turn_id: int, after_seq: int
) -> AsyncIterator[StoredEvent]:
    last = after_seq
    async with broker.subscribe(turn_id) as subscription:
        while True:
            async with sessions() as db:
                batch = await read_events(db, turn_id, last, PAGE)
                turn = await db.get(Turn, turn_id)
                if not batch and turn is not None and turn.events_pruned_at is not None:
                    batch = await synthesize(db, turn, last)
            for event in batch:
                yield event
                last = event.seq
                if event.event in TERMINAL_EVENTS:
                    return
            if len(batch) == PAGE:
                continue
            if turn is None or (turn.status != TurnStatus.RUNNING and last >= turn.last_seq):
                return
            while True:
                wait = DEGRADED_WAIT_SECONDS if subscription.degraded else LIVE_WAIT_SECONDS
                event = await subscription.next(wait)
                if event is None or event.seq > last + 1:
                    break  # re-read the durable log
                if event.seq <= last:
                    continue
                yield event
                last = event.seq
                if event.event in TERMINAL_EVENTS:
                    return


async def synthesize(db: AsyncSession, turn: Turn, after_seq: int) -> list[StoredEvent]:
    """Replay of a finished turn whose log was pruned, built from the stored message.

    The terminal event keeps its original id (`last_seq`); a full replay (after 0) also gets the
    text, tool blocks and final metrics under ids below it. A client in the middle of the turn
    receives the terminal event, which carries the complete message.
    """
    message = await db.get(Message, turn.assistant_message_pk)
    if message is None or after_seq >= turn.last_seq:
        return []
    result = message.result or {}
    terminal = {
        TurnStatus.COMPLETED: "turn.completed",
        TurnStatus.CANCELLED: "turn.cancelled",
    }.get(TurnStatus(turn.status), "turn.failed")
    value = str(result.get("value") or "")
    terminal_data: dict[str, Any]
    if terminal == "turn.completed":
        terminal_data = {"message": message_payload(message)}
    elif terminal == "turn.cancelled":
        terminal_data = {"partial": value}
    else:
        error = result.get("error") or {
            "code": turn.error_code or "failed",
            "message": turn.error_message or "",
        }
        terminal_data = {**error, "partial": value}
    body: list[tuple[str, dict[str, Any]]] = []
    if after_seq == 0:
        body.append(
            ("turn.started", {"turn_id": turn.id, "message_id": message.message_id, "synthesized": True})
        )
        for block in result.get("blocks") or []:
            if block.get("type") == "text":
                body.append(("message.delta", {"text": block["text"]}))
            elif block.get("type") == "tool":
                body.append(
                    (
                        "tool.started",
                        {"call_id": block["call_id"], "name": block["name"], "args": block.get("args", {})},
                    )
                )
                if block.get("output") is not None:
                    body.append(
                        (
                            "tool.completed",
                            {
                                "call_id": block["call_id"],
                                "name": block["name"],
                                "output": block["output"],
                                "is_error": block.get("status") == "error",
                                "truncated_for_model": block.get("truncated_for_model", False),
                            },
                        )
                    )
        if result.get("context_metrics"):
            body.append(("context.metrics", result["context_metrics"]))
        body = body[: max(0, turn.last_seq - 1)]
    events = [StoredEvent(turn.id, seq, name, data) for seq, (name, data) in enumerate(body, start=1)]
    events.append(StoredEvent(turn.id, turn.last_seq, terminal, terminal_data))
    return events


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
