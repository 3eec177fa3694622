"""Model-visible history resolution (SPEC 6.2): the one pipeline behind every history read.

The user-visible record (rows of `messages`) is never rewritten. The model-visible history is
rebuilt from it: user rows become user messages, assistant rows contribute their stored
`messages_chain`, and with `from_latest_compaction` the newest checkpoint chain replaces
everything before it, so the cost depends on the turns after the checkpoint only: the
checkpoint is found through `ix_messages_checkpoint` and the rows after it through the
(conversation, message_id) key, never by reading the whole conversation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.models import Attachment, Conversation, Message, MessageStatus, Role
from backend.services.conversations import LineageLevel, lineage
from chat_shell.contracts import ChainMessage, ChainMetadata


@dataclass(frozen=True)
class ResolvedHistory:
    messages: list[ChainMessage]
    # The assistant message whose checkpoint chain opens `messages`, if one does.
    checkpoint_message_id: int | None = None


def user_entry_id(conversation_id: int, message_id: int) -> str:
    return f"u{conversation_id}-{message_id}"


def partial_entry_id(conversation_id: int, message_id: int) -> str:
    return f"a{conversation_id}-{message_id}"


def level_clause(level: LineageLevel, after: int, before: int | None) -> Any:
    """Messages of one lineage level with `after < message_id < before`."""
    clause = (Message.conversation_id == level.conversation_id) & (Message.message_id > max(level.low, after))
    if level.high is not None:
        clause &= Message.message_id <= level.high
    if before is not None:
        clause &= Message.message_id < before
    return clause


def newest_checkpoint_query(level: LineageLevel, before_message_id: int | None, *columns: Any) -> Any:
    """The index probe for the newest checkpoint of one lineage level (`ix_messages_checkpoint`)."""
    # `== True` (not IS TRUE) so PostgreSQL matches the index column by equality.
    checkpoint = Message.has_checkpoint == True  # noqa: E712
    return (
        select(*columns)
        .where(level_clause(level, 0, before_message_id), checkpoint)
        .order_by(Message.message_id.desc())
        .limit(1)
    )


async def latest_checkpoint(
    db: AsyncSession, levels: Sequence[LineageLevel], before_message_id: int | None
) -> Message | None:
    """The newest assistant message of any status whose chain holds a summary checkpoint.

    One index probe per lineage level (`ix_messages_checkpoint`, read backwards)."""
    for level in levels:
        found = await db.scalar(newest_checkpoint_query(level, before_message_id, Message))
        if found is not None:
            return found
    return None


async def checkpoint_message_id(
    db: AsyncSession, levels: Sequence[LineageLevel], before_message_id: int | None
) -> int | None:
    """The `message_id` of the newest checkpoint (the same probe, without loading the row)."""
    for level in levels:
        found = await db.scalar(newest_checkpoint_query(level, before_message_id, Message.message_id))
        if found is not None:
            return found
    return None


def rows_query(level: LineageLevel, after: int, before: int | None) -> Any:
    """Rows of one lineage level after the checkpoint, newest first (the unique key's index)."""
    return select(Message).where(level_clause(level, after, before)).order_by(Message.message_id.desc())


async def rows_after(
    db: AsyncSession, levels: Sequence[LineageLevel], after: int, before: int | None, limit: int | None
) -> list[Message]:
    """Rows with `after < message_id < before` along the lineage, oldest first; the newest
    `limit` of them when a limit is given."""
    found: list[Message] = []
    for level in levels:
        if level.high is not None and level.high <= after:
            break
        stmt = rows_query(level, after, before)
        if limit is not None:
            stmt = stmt.limit(limit - len(found))
        found.extend(await db.scalars(stmt))
        if limit is not None and len(found) >= limit:
            break
    return list(reversed(found))


def stored_chain(message: Message) -> list[ChainMessage]:
    entries = (message.result or {}).get("messages_chain") or []
    return [ChainMessage.model_validate(entry) for entry in entries]


def checkpoint_slice(chain: list[ChainMessage]) -> list[ChainMessage]:
    """The self-contained checkpoint: from the newest summary message to the end of the chain.

    A later summary folds the earlier ones in, so everything before it is superseded."""
    for index in range(len(chain) - 1, -1, -1):
        if chain[index].metadata.summary_compacted:
            return chain[index:]
    return chain


def _source(message: Message, **extra: Any) -> ChainMetadata:
    return ChainMetadata(
        source_conversation_id=message.conversation_id,
        source_message_id=message.message_id,
        source_status=message.status,
        **extra,
    )


def unsaved_text(result: dict[str, Any], chain: Sequence[ChainMessage]) -> str:
    """The text a failed, cancelled or interrupted turn showed that its chain does not hold.

    The chain keeps the model replies that finished; a reply cut off mid-stream exists only as
    visible text. The visible text blocks after the last one a chain reply holds are that part.
    """
    blocks = result.get("blocks") or []
    if blocks:
        texts = [b["text"] for b in blocks if b.get("type") == "text" and b.get("text")]
    else:
        texts = [str(result["value"])] if result.get("value") else []
    held = {e.content for e in chain if e.role == "assistant" and isinstance(e.content, str) and e.content}
    last_held = max((index for index, text in enumerate(texts) if text in held), default=-1)
    return "\n\n".join(texts[last_held + 1 :])


def turn_entries(message: Message) -> list[ChainMessage]:
    """What one assistant row contributes: its chain, plus the unsaved visible text of a turn
    that did not complete (the partial output the user saw)."""
    chain = stored_chain(message)
    result = message.result or {}
    if message.status == MessageStatus.COMPLETED:
        text = "" if chain else str(result.get("value") or "")
    else:
        text = unsaved_text(result, chain)
    if text:
        chain.append(
            ChainMessage(
                role="assistant",
                content=text,
                id=partial_entry_id(message.conversation_id, message.message_id),
                metadata=_source(message),
            )
        )
    return chain


def expand(message: Message, attachment_ids: Sequence[int]) -> list[ChainMessage]:
    """The model-visible messages one user-visible row contributes after the opening checkpoint.

    Summaries and retained clones belong to a checkpoint only where it opens the history; an
    older checkpoint row (history read without `from_latest_compaction`) contributes the
    messages its turn produced and nothing that repeats earlier rows.
    """
    if message.role == Role.USER:
        return [
            ChainMessage(
                role="user",
                content=message.content,
                id=user_entry_id(message.conversation_id, message.message_id),
                metadata=_source(message, attachment_ids=list(attachment_ids) or None),
            )
        ]
    return [
        entry
        for entry in turn_entries(message)
        if not (entry.metadata.summary_compacted or entry.metadata.checkpoint_retained)
    ]


async def _attachment_ids(db: AsyncSession, rows: Sequence[Message]) -> dict[int, list[int]]:
    user_pks = [row.id for row in rows if row.role == Role.USER]
    if not user_pks:
        return {}
    grouped: dict[int, list[int]] = {}
    found = await db.execute(
        select(Attachment.message_pk, Attachment.id)
        .where(Attachment.message_pk.in_(user_pks))
        .order_by(Attachment.id)
    )
    for message_pk, attachment_id in found:
        grouped.setdefault(message_pk, []).append(attachment_id)
    return grouped


async def resolve_history(
    db: AsyncSession,
    conversation: Conversation,
    *,
    before_message_id: int | None = None,
    limit: int | None = None,
    from_latest_compaction: bool = True,
) -> ResolvedHistory:
    """The model-visible history of `conversation` (fork lineage included) before a message.

    With `from_latest_compaction`, the newest checkpoint chain (of an assistant message of any
    status) opens the history and only later rows are read; `limit` counts rows after the
    checkpoint and never cuts the checkpoint chain. `limit <= 0` means no history.
    """
    if limit is not None and limit <= 0:
        return ResolvedHistory([])
    levels = await lineage(db, conversation)
    checkpoint = await latest_checkpoint(db, levels, before_message_id) if from_latest_compaction else None
    after = checkpoint.message_id if checkpoint is not None else 0
    rows = await rows_after(db, levels, after, before_message_id, limit)
    attachments = await _attachment_ids(db, rows)
    history = checkpoint_slice(turn_entries(checkpoint)) if checkpoint is not None else []
    for row in rows:
        history.extend(expand(row, attachments.get(row.id, [])))
    return ResolvedHistory(history, checkpoint.message_id if checkpoint is not None else None)


class DatabaseHistory:
    """The pipeline over a session factory: what package mode's history loader calls."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def __call__(self, conversation_id: int, before_message_id: int) -> list[ChainMessage]:
        async with self._sessions() as db:
            conversation = await db.get(Conversation, conversation_id)
            if conversation is None or conversation.deleted_at is not None:
                raise LookupError(f"conversation {conversation_id} does not exist")
            resolved = await resolve_history(db, conversation, before_message_id=before_message_id)
        return resolved.messages
