"""How a turn ends in the database: its result on the assistant message and the turn row, the
compaction checkpoints and records it made, and the ending of a turn whose runner is gone
(from what its log shows)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from backend.models import (
    CompactionEvent,
    Conversation,
    Message,
    MessageStatus,
    Turn,
    TurnEvent,
    TurnStatus,
)
from backend.models.base import utcnow
from backend.services.dashboard import rollups
from backend.services.delivery.event_log import StoredEvent, latest_seq
from backend.services.delivery.stream_events import RESTARTED, Cancelled, Failed, StreamPayload, visible
from backend.services.delivery.turns import StartedTurn
from backend.services.records import model_requests
from chat_shell.contracts import ChainMessage, CompactionRecord, TurnResult
from chat_shell.events.fold import VISIBLE_EVENT_TYPES, fold

INTERRUPTED_NOTE = (
    "The service restarted while this reply was being written; what you see is what was written before."
)
WORKER_LOST_NOTE = (
    "The server writing this reply failed twice; what you see is what was written before. Try again."
)
STOPPED_NOTE = "Stopped before it started."
NOT_QUEUED_NOTE = "This reply could not be queued; nothing was written. Send it again."
LOG_FAILED_NOTE = (
    "This reply could not be stored while it was being written; what you see is what was stored before."
)


TURN_ROW_FIELDS = {"ttft_ms", "overflow_errors", "attempts", "requests"}


def result_document(
    result: TurnResult, error: dict[str, str] | None = None, model: str | None = None
) -> dict[str, Any]:
    """The assistant message's `result` JSON (SPEC 3) from a finished turn; `model` is the one
    that wrote it (shown with the reply)."""
    # What the turn row holds (time to first token, overflows, attempts) stays off the message.
    document = result.model_dump(mode="json", exclude=TURN_ROW_FIELDS, exclude_none=True)
    document["messages_chain"] = [
        entry.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
        for entry in result.messages_chain
    ]
    if error:
        document["error"] = error
    if model:
        document["model"] = model
    return document


def has_summary(chain: Sequence[ChainMessage]) -> bool:
    return any(entry.metadata.summary_compacted for entry in chain)


async def store_checkpoint(
    db: AsyncSession, assistant_message_pk: int, chain: Sequence[ChainMessage]
) -> None:
    """Writes a compaction checkpoint to the running assistant message the moment it is made."""
    message = await db.get(Message, assistant_message_pk)
    if message is None:
        return
    document = dict(message.result or {})
    document["messages_chain"] = [
        entry.model_dump(mode="json", exclude_none=True, exclude_defaults=True) for entry in chain
    ]
    message.result = document
    message.has_checkpoint = has_summary(chain)
    message.updated_at = utcnow()


async def add_compaction_record(
    db: AsyncSession, assistant_message_pk: int, record: CompactionRecord
) -> None:
    """Adds a compaction made after the turn (ahead of time) to the message's records, where
    the transcript and the export show it like one made inside the turn."""
    message = await db.get(Message, assistant_message_pk)
    if message is None:
        return
    document = dict(message.result or {})
    document["context_compactions"] = [
        *document.get("context_compactions", []),
        record.model_dump(mode="json", exclude_none=True),
    ]
    message.result = document


async def record_compaction(
    db: AsyncSession, started: StartedTurn, record: CompactionRecord, model_profile: str | None
) -> None:
    if record.status not in ("completed", "fallback"):
        return
    before, after = record.before_tokens, record.after_tokens
    row = CompactionEvent(
        conversation_id=started.conversation_id,
        turn_id=started.turn_id,
        assistant_message_pk=started.assistant_message.id,
        model_profile=model_profile,
        strategy=record.strategy,
        status=record.status,
        before_tokens=before,
        after_tokens=after,
        tokens_saved=max(0, before - after) if before is not None and after is not None else None,
        duration_ms=record.duration_ms,
        failure_reason=record.failure_reason,
        retention_score=record.retention_score,
        created_at=record.created_at,
    )
    db.add(row)
    rollups.stage_compactions(db, [rollups.compaction_row(row)])


async def finish_turn(
    db: AsyncSession,
    started: StartedTurn,
    status: TurnStatus,
    result: TurnResult,
    error: dict[str, str] | None,
    now: datetime,
    terminal_seq: int,
) -> Message:
    """Writes the outcome (completed, failed or cancelled) to the assistant message and the
    turn row, together; the caller's transaction writes the staged rollups."""
    message = await db.get(Message, started.assistant_message.id)
    turn = await db.get(Turn, started.turn_id)
    assert message is not None and turn is not None
    running = rollups.turn_row(turn)
    message.status = MessageStatus(status.value)
    document = result_document(result, error, turn.model_profile)
    if message.has_checkpoint and not has_summary(result.messages_chain):
        # The turn compacted, but its final state did not keep the checkpoint (it ended outside
        # the runtime, or a stop lost the graph state): the checkpoint stored when it was made
        # stays, followed by whatever else the turn reported, so the next turn starts there.
        stored = (message.result or {}).get("messages_chain", [])
        held = {entry.get("id") for entry in stored}
        document["messages_chain"] = stored + [
            entry for entry in document["messages_chain"] if entry.get("id") not in held
        ]
    else:
        message.has_checkpoint = has_summary(result.messages_chain)
    message.result = document
    message.updated_at = now
    metrics = result.context_metrics
    turn.status = status
    turn.ended_at = now
    turn.last_seq = terminal_seq
    turn.termination_reason = result.termination_reason
    turn.error_code = error["code"] if error else None
    turn.error_message = error["message"] if error else None
    turn.input_tokens = result.usage.input_tokens
    turn.output_tokens = result.usage.output_tokens
    turn.ttft_ms = result.ttft_ms
    turn.overflow_errors = result.overflow_errors
    turn.attempts = result.attempts
    await model_requests.store(db, turn, result.requests)
    turn.refused = result.termination_reason == "context_refused"
    if metrics is not None:
        turn.context_used_tokens = metrics.used_input
        turn.context_available_tokens = metrics.available_input
        turn.context_window = metrics.context_window
    rollups.stage_finished(db, turn, running)
    await db.execute(
        update(Conversation).where(Conversation.id == started.conversation_id).values(updated_at=now)
    )
    return message


@dataclass(frozen=True)
class LogEnding:
    """How a turn that lost its runner ends: its status, error code and the note it shows."""

    status: TurnStatus
    code: str
    note: str


# The process running the turn stopped (a crash, a restart).
INTERRUPTED = LogEnding(TurnStatus.INTERRUPTED, "interrupted", INTERRUPTED_NOTE)
# The workers running the turn died on each of its attempts.
WORKER_LOST = LogEnding(TurnStatus.FAILED, "worker_lost", WORKER_LOST_NOTE)
# Stopped while it waited in the queue (no worker had taken it).
STOPPED_IN_QUEUE = LogEnding(TurnStatus.CANCELLED, "cancelled", STOPPED_NOTE)
# The job queue refused the turn (its database unreachable).
NOT_QUEUED = LogEnding(TurnStatus.FAILED, "queue_unavailable", NOT_QUEUED_NOTE)
# The turn's events could not be written (a dropped database connection, a rejected write).
LOG_FAILED = LogEnding(TurnStatus.FAILED, "event_log_failed", LOG_FAILED_NOTE)


async def end_from_log(db: AsyncSession, turn: Turn, ending: LogEnding) -> StoredEvent:
    """Ends a turn whose runner is gone with what its log shows the user saw since its last
    start (the one fold of its text and tool events; a tool that never returned ends as
    `error`).

    Returns the terminal event (`turn.failed`, or `turn.cancelled` for a stopped one)
    appended to its log, so open streams end and a reload shows the note. The caller's
    transaction writes the staged rollups.
    """
    # Only the last attempt counts: a restart replaced what the ones before it wrote.
    restarted = await db.scalar(
        select(func.coalesce(func.max(TurnEvent.seq), 0)).where(
            TurnEvent.turn_id == turn.id, TurnEvent.event == RESTARTED
        )
    )
    rows = await db.execute(
        select(TurnEvent.event, TurnEvent.data)
        .where(
            TurnEvent.turn_id == turn.id,
            TurnEvent.seq > (restarted or 0),
            TurnEvent.event.in_(VISIBLE_EVENT_TYPES),
        )
        .order_by(TurnEvent.seq)
    )
    seen = fold(visible(name, data) for name, data in rows)
    seen.end()
    seq = await latest_seq(db, turn.id) + 1
    message = await db.get(Message, turn.assistant_message_pk)
    now = utcnow()
    if message is not None:
        document = dict(message.result or {})
        document.update(
            value=seen.text,
            blocks=[block.model_dump(mode="json", exclude_none=True) for block in seen.blocks],
            termination_reason=ending.code,
            note=ending.note,
            error={"code": ending.code, "message": ending.note},
        )
        message.result = document
        message.status = MessageStatus(ending.status.value)
        message.updated_at = now
    running = rollups.turn_row(turn)
    turn.status = ending.status
    turn.ended_at = now
    turn.termination_reason = ending.code
    turn.error_code = ending.code
    turn.error_message = ending.note
    turn.last_seq = seq
    rollups.stage_finished(db, turn, running)
    payload: StreamPayload = (
        Cancelled(partial=seen.text)
        if ending.status == TurnStatus.CANCELLED
        else Failed(code=ending.code, message=ending.note, partial=seen.text)
    )
    stored = StoredEvent.of(turn.id, seq, payload)
    db.add(TurnEvent(turn_id=turn.id, seq=seq, event=stored.event, data=stored.data))
    return stored
