"""Turn records: starting a turn (messages first), persisting its outcome, recovering orphans."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from backend.api.errors import ApiError
from backend.models import (
    Attachment,
    CompactionEvent,
    Conversation,
    Message,
    MessageStatus,
    Role,
    Turn,
    TurnEvent,
    TurnStatus,
    User,
)
from backend.models.base import utcnow
from backend.services import attachments, rollups
from backend.services.conversations import user_visible_result
from chat_shell.contracts import ChainMessage, CompactionRecord, TurnResult

INTERRUPTED_NOTE = (
    "The service restarted while this reply was being written; what you see is what was written before."
)


@dataclass(frozen=True)
class StartedTurn:
    turn_id: int
    conversation_id: int
    owner_id: int
    user_message: Message
    assistant_message: Message
    # The user message's files, in the order messages list them (upload order).
    attachments: tuple[Attachment, ...]

    @property
    def attachment_ids(self) -> tuple[int, ...]:
        return tuple(row.id for row in self.attachments)


async def start_turn(
    db: AsyncSession,
    user: User,
    conversation: Conversation,
    content: str,
    attachment_ids: Sequence[int],
    runner_id: str,
    model_profile: str | None,
) -> StartedTurn:
    """Stores the user message, a running assistant message and the turn, atomically.

    The partial unique index on running turns makes a concurrent second send fail here, on
    any replica, and nothing of it remains.
    """
    if await db.scalar(
        select(Turn.id).where(Turn.conversation_id == conversation.id, Turn.status == TurnStatus.RUNNING)
    ):
        raise _turn_running()
    # Atomic increment: concurrent senders serialize on the row instead of reusing numbers.
    next_id = await db.scalar(
        update(Conversation)
        .where(Conversation.id == conversation.id)
        .values(next_message_id=Conversation.next_message_id + 2, updated_at=utcnow())
        .returning(Conversation.next_message_id)
    )
    assert next_id is not None
    user_message = Message(
        conversation_id=conversation.id,
        message_id=next_id - 2,
        role=Role.USER,
        status=MessageStatus.COMPLETED,
        content=content,
    )
    assistant_message = Message(
        conversation_id=conversation.id,
        message_id=next_id - 1,
        role=Role.ASSISTANT,
        status=MessageStatus.RUNNING,
        content="",
        result={"value": "", "blocks": []},
    )
    db.add_all([user_message, assistant_message])
    await db.flush()
    # Raises (404 for a deleted or unknown id) before anything is committed: nothing is stored.
    linked = await attachments.link_to_message(db, user, conversation, user_message, attachment_ids)
    now = utcnow()
    turn = Turn(
        conversation_id=conversation.id,
        user_message_pk=user_message.id,
        assistant_message_pk=assistant_message.id,
        status=TurnStatus.RUNNING,
        runner_id=runner_id,
        heartbeat_at=now,
        started_at=now,
        model_profile=model_profile,
    )
    db.add(turn)
    counted = rollups.turn_row(turn)
    try:
        async with db.begin_nested():
            await db.flush()
    except IntegrityError:
        raise _turn_running() from None
    rollups.stage_turns(db, [counted])
    return StartedTurn(
        turn.id,
        conversation.id,
        user.id,
        user_message,
        assistant_message,
        tuple(sorted(linked, key=lambda row: row.id)),
    )


def _turn_running() -> ApiError:
    return ApiError(
        409, "turn_running", "a reply is still being written in this conversation; stop it or wait"
    )


_MESSAGE_STATUS = {
    "turn.completed": MessageStatus.COMPLETED,
    "turn.failed": MessageStatus.FAILED,
    "turn.cancelled": MessageStatus.CANCELLED,
}
_TURN_STATUS = {
    "turn.completed": TurnStatus.COMPLETED,
    "turn.failed": TurnStatus.FAILED,
    "turn.cancelled": TurnStatus.CANCELLED,
}


def result_document(result: TurnResult, error: dict[str, str] | None = None) -> dict[str, Any]:
    """The assistant message's `result` JSON (SPEC 3) from a finished turn."""
    document = result.model_dump(mode="json", exclude={"ttft_ms", "overflow_errors"}, exclude_none=True)
    document["messages_chain"] = [
        entry.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
        for entry in result.messages_chain
    ]
    if error:
        document["error"] = error
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
    terminal: str,
    result: TurnResult,
    error: dict[str, str] | None,
    now: datetime,
    terminal_seq: int,
) -> Message:
    """Writes the outcome to the assistant message and the turn row, together."""
    message = await db.get(Message, started.assistant_message.id)
    turn = await db.get(Turn, started.turn_id)
    assert message is not None and turn is not None
    running = rollups.turn_row(turn)
    message.status = _MESSAGE_STATUS[terminal]
    document = result_document(result, error)
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
    turn.status = _TURN_STATUS[terminal]
    turn.ended_at = now
    turn.last_seq = terminal_seq
    turn.termination_reason = result.termination_reason
    turn.error_code = error["code"] if error else None
    turn.error_message = error["message"] if error else None
    turn.input_tokens = result.usage.input_tokens
    turn.output_tokens = result.usage.output_tokens
    turn.ttft_ms = result.ttft_ms
    turn.overflow_errors = result.overflow_errors
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


def message_payload(message: Message) -> dict[str, Any]:
    """The user-visible message as sent in `turn.completed` (same shape as the REST API)."""
    return {
        "conversation_id": message.conversation_id,
        "message_id": message.message_id,
        "role": message.role,
        "status": message.status,
        "content": message.content,
        "result": user_visible_result(message.result),
        "created_at": message.created_at.isoformat(),
        "updated_at": message.updated_at.isoformat(),
    }


async def orphaned_turns(db: AsyncSession, alive_runner: str, stale_before: datetime | None) -> list[Turn]:
    """Running turns whose runner is gone: another runner id, silent since `stale_before`
    (or any other runner at all when `stale_before` is None: a single process just restarted)."""
    stmt = select(Turn).where(
        Turn.status == TurnStatus.RUNNING, Turn.runner_id.is_distinct_from(alive_runner)
    )
    if stale_before is not None:
        stmt = stmt.where(func.coalesce(Turn.heartbeat_at, Turn.started_at) < stale_before)
    return list(await db.scalars(stmt))


async def interrupt(db: AsyncSession, turn: Turn) -> tuple[int, dict[str, Any]]:
    """Marks an orphaned turn interrupted, keeping the partial output its log holds.

    Returns the seq and data of the terminal `turn.failed` event appended to its log, so open
    streams end and a reload shows the note.
    """
    rows = await db.execute(
        select(TurnEvent.seq, TurnEvent.event, TurnEvent.data)
        .where(TurnEvent.turn_id == turn.id)
        .order_by(TurnEvent.seq)
    )
    partial, blocks, last_seq = "", [], 0
    tools: dict[str, dict[str, Any]] = {}
    for seq, event, data in rows:
        last_seq = seq
        if event == "message.delta":
            partial += data["text"]
            if blocks and blocks[-1]["type"] == "text":
                blocks[-1]["text"] += data["text"]
            else:
                blocks.append({"type": "text", "text": data["text"]})
        elif event == "tool.started":
            block = {
                "type": "tool",
                "call_id": data["call_id"],
                "name": data["name"],
                "args": data.get("args", {}),
                "status": "running",
            }
            tools[data["call_id"]] = block
            blocks.append(block)
        elif event == "tool.completed" and data["call_id"] in tools:
            tools[data["call_id"]].update(
                output=data["output"], status="error" if data.get("is_error") else "completed"
            )
    message = await db.get(Message, turn.assistant_message_pk)
    now = utcnow()
    if message is not None:
        document = dict(message.result or {})
        document.update(
            value=partial,
            blocks=blocks,
            termination_reason="interrupted",
            note=INTERRUPTED_NOTE,
            error={"code": "interrupted", "message": INTERRUPTED_NOTE},
        )
        message.result = document
        message.status = MessageStatus.INTERRUPTED
        message.updated_at = now
    turn.status = TurnStatus.INTERRUPTED
    turn.ended_at = now
    turn.termination_reason = "interrupted"
    turn.error_code = "interrupted"
    turn.error_message = INTERRUPTED_NOTE
    data = {"code": "interrupted", "message": INTERRUPTED_NOTE, "partial": partial}
    db.add(TurnEvent(turn_id=turn.id, seq=last_seq + 1, event="turn.failed", data=data))
    turn.last_seq = last_seq + 1
    return last_seq + 1, data
