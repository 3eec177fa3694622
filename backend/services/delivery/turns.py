"""Turn records: starting a turn (messages first), persisting its outcome, recovering orphans."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from backend.models import (
    Attachment,
    CompactionEvent,
    Conversation,
    Message,
    MessageStatus,
    Role,
    TitleSource,
    Turn,
    TurnEvent,
    TurnStatus,
    User,
)
from backend.models.base import utcnow
from backend.services.dashboard import rollups
from backend.services.delivery.event_log import StoredEvent, latest_seq
from backend.services.delivery.stream_events import Failed, visible
from backend.services.errors import Conflict, Invalid, RateLimited
from backend.services.records import attachments, auth, model_requests
from backend.services.records.conversations import running_turns
from chat_shell.contracts import ChainMessage, CompactionRecord, TurnResult
from chat_shell.events.fold import VISIBLE_EVENT_TYPES, fold

INTERRUPTED_NOTE = (
    "The service restarted while this reply was being written; what you see is what was written before."
)
LOG_FAILED_NOTE = (
    "This reply could not be stored while it was being written; what you see is what was stored before."
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
    # The conversation still has its first line for a title (a generated one may follow).
    awaits_title: bool = False

    @property
    def attachment_ids(self) -> tuple[int, ...]:
        return tuple(row.id for row in self.attachments)


def require_content(content: str, attachment_ids: Sequence[int]) -> None:
    if not content.strip() and not attachment_ids:
        raise Invalid("empty_message", "write a message or attach a file")


async def running_turn_id(db: AsyncSession, conversation_id: int) -> int | None:
    return (await running_turns(db, [conversation_id])).get(conversation_id)


async def turn_to_stop(db: AsyncSession, conversation_id: int) -> int:
    turn_id = await running_turn_id(db, conversation_id)
    if turn_id is None:
        raise Conflict("no_running_turn", "nothing is being written in this conversation")
    return turn_id


async def store_stop(db: AsyncSession, turn_id: int) -> None:
    """Records a stop request on a running turn (the runner polls it when the broker is down)."""
    await db.execute(
        update(Turn)
        .where(Turn.id == turn_id, Turn.status == TurnStatus.RUNNING, Turn.stop_requested_at.is_(None))
        .values(stop_requested_at=utcnow())
    )


async def stops_requested(db: AsyncSession, turn_ids: Sequence[int]) -> list[int]:
    """Which of these turns have a stored stop request."""
    return list(
        await db.scalars(select(Turn.id).where(Turn.id.in_(turn_ids), Turn.stop_requested_at.is_not(None)))
    )


async def start_turn(
    db: AsyncSession,
    user: User,
    conversation: Conversation,
    content: str,
    attachment_ids: Sequence[int],
    runner_id: str,
    model_profile: str | None,
    max_running: int | None = None,
    *,
    edits: Message | None = None,
) -> StartedTurn:
    """Stores the user message, a running assistant message and the turn, atomically.

    The question follows the current leaf, or, editing, is a new version of `edits` (the same
    parent, and its files). The partial unique index on running turns makes a concurrent second
    send fail here, on any replica, and nothing of it remains. A user with `max_running` turns
    running already (across conversations) is refused (`too_many_running_turns`).
    """
    await _require_idle(db, user, conversation, max_running)
    first = await _number(db, conversation, 2)
    question = Message(
        conversation_id=conversation.id,
        message_id=first,
        role=Role.USER,
        status=MessageStatus.COMPLETED,
        content=content,
        parent_pk=edits.parent_pk if edits is not None else conversation.current_leaf_pk,
        attachments_of_pk=edits.files_pk if edits is not None else None,
    )
    db.add(question)
    await db.flush()
    if edits is not None:
        linked = await attachments.sent_with(db, edits)
    else:
        # Raises (404 for a deleted or unknown id) before anything is committed: nothing is stored.
        linked = await attachments.link_to_message(db, user, conversation, question, attachment_ids)
    return await _begin(db, user, conversation, question, first + 1, linked, runner_id, model_profile)


async def start_version(
    db: AsyncSession,
    user: User,
    conversation: Conversation,
    question: Message,
    runner_id: str,
    model_profile: str | None,
    max_running: int | None = None,
) -> StartedTurn:
    """A new version of the reply to `question` (regenerate, retry): a running assistant
    message beside the earlier replies, and its turn; the question and its files stay."""
    await _require_idle(db, user, conversation, max_running)
    number = await _number(db, conversation, 1)
    linked = await attachments.sent_with(db, question)
    return await _begin(db, user, conversation, question, number, linked, runner_id, model_profile)


async def _require_idle(
    db: AsyncSession, user: User, conversation: Conversation, max_running: int | None
) -> None:
    if await running_turn_id(db, conversation.id) is not None:
        raise _turn_running()
    if max_running is not None:
        await _require_turn_slot(db, user, max_running)


async def _number(db: AsyncSession, conversation: Conversation, count: int) -> int:
    """The first of `count` new message numbers. An atomic increment: concurrent senders
    serialize on the row instead of reusing numbers."""
    next_id = await db.scalar(
        update(Conversation)
        .where(Conversation.id == conversation.id)
        .values(next_message_id=Conversation.next_message_id + count, updated_at=utcnow())
        .returning(Conversation.next_message_id)
    )
    assert next_id is not None
    return next_id - count


async def _begin(
    db: AsyncSession,
    user: User,
    conversation: Conversation,
    question: Message,
    number: int,
    linked: Sequence[Attachment],
    runner_id: str,
    model_profile: str | None,
) -> StartedTurn:
    """The running reply to `question`, the turn, and the conversation's leaf moved to it."""
    reply = Message(
        conversation_id=conversation.id,
        message_id=number,
        role=Role.ASSISTANT,
        status=MessageStatus.RUNNING,
        content="",
        result={"value": "", "blocks": [], "model": model_profile},
        parent_pk=question.id,
    )
    db.add(reply)
    await db.flush()
    turn = Turn(
        conversation_id=conversation.id,
        user_message_pk=question.id,
        assistant_message_pk=reply.id,
        runner_id=runner_id,
        model_profile=model_profile,
    )
    turn.status = TurnStatus.RUNNING
    turn.started_at = turn.heartbeat_at = utcnow()
    db.add(turn)
    counted = rollups.turn_row(turn)
    try:
        async with db.begin_nested():
            await db.flush()
    except IntegrityError:
        raise _turn_running() from None
    await db.execute(
        update(Conversation).where(Conversation.id == conversation.id).values(current_leaf_pk=reply.id)
    )
    rollups.stage_turns(db, [counted])
    await rollups.write_staged(db)
    return StartedTurn(
        turn.id,
        conversation.id,
        user.id,
        question,
        reply,
        tuple(sorted(linked, key=lambda row: row.id)),
        awaits_title=conversation.title_source == TitleSource.FALLBACK,
    )


async def _require_turn_slot(db: AsyncSession, user: User, max_running: int) -> None:
    # The user's row is locked until this send commits, so concurrent sends of one user on any
    # replica count one after another (PostgreSQL; SQLite has one writer at a time anyway). A
    # disabling commits before this lock or after this send (which then stops its turn).
    disabled_at = await db.scalar(select(User.disabled_at).where(User.id == user.id).with_for_update())
    if disabled_at is not None:
        raise auth.account_disabled()
    running = await db.scalar(
        select(func.count(Turn.id))
        .join(Conversation, Conversation.id == Turn.conversation_id)
        .where(Conversation.owner_id == user.id, Turn.status == TurnStatus.RUNNING)
    )
    if (running or 0) >= max_running:
        raise RateLimited(
            "too_many_running_turns",
            f"{running} replies are being written for you at once, the limit; wait for one to finish "
            "or stop one",
            retry_after=5,
        )


def _turn_running() -> Conflict:
    return Conflict("turn_running", "a reply is still being written in this conversation; stop it or wait")


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


async def orphaned_turns(
    db: AsyncSession, alive_runner: str, stale_before: datetime | None, own_stale_before: datetime
) -> list[Turn]:
    """Running turns whose runner is gone: another runner id, silent since `stale_before`
    (or any other runner at all when `stale_before` is None: a single process just restarted),
    and the alive runner's own turns silent since `own_stale_before` (the caller keeps those
    whose job still runs)."""
    silent_since = func.coalesce(Turn.heartbeat_at, Turn.started_at)
    others = Turn.runner_id.is_distinct_from(alive_runner)
    if stale_before is not None:
        others = and_(others, silent_since < stale_before)
    own = and_(Turn.runner_id == alive_runner, silent_since < own_stale_before)
    return list(await db.scalars(select(Turn).where(Turn.status == TurnStatus.RUNNING, or_(others, own))))


@dataclass(frozen=True)
class LogEnding:
    """How a turn that lost its runner ends: its status, error code and the note it shows."""

    status: TurnStatus
    code: str
    note: str


# The process running the turn stopped (a crash, a restart).
INTERRUPTED = LogEnding(TurnStatus.INTERRUPTED, "interrupted", INTERRUPTED_NOTE)
# The turn's events could not be written (a dropped database connection, a rejected write).
LOG_FAILED = LogEnding(TurnStatus.FAILED, "event_log_failed", LOG_FAILED_NOTE)


async def end_from_log(db: AsyncSession, turn: Turn, ending: LogEnding) -> StoredEvent:
    """Ends a turn whose runner is gone with what its log shows the user saw (the one fold of
    its text and tool events; a tool that never returned ends as `error`).

    Returns the terminal `turn.failed` event appended to its log, so open streams end and a
    reload shows the note. The caller's transaction writes the staged rollups.
    """
    rows = await db.execute(
        select(TurnEvent.event, TurnEvent.data)
        .where(TurnEvent.turn_id == turn.id, TurnEvent.event.in_(VISIBLE_EVENT_TYPES))
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
    stored = StoredEvent.of(turn.id, seq, Failed(code=ending.code, message=ending.note, partial=seen.text))
    db.add(TurnEvent(turn_id=turn.id, seq=seq, event=stored.event, data=stored.data))
    return stored
