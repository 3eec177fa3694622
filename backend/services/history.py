"""Model-visible history resolution (SPEC 6.2): the one pipeline behind every history read.

The user-visible record (rows of `messages`) is never rewritten. The model-visible history is
rebuilt from it: user rows become user messages, assistant rows contribute their stored
`messages_chain`, and with `from_latest_compaction` the newest checkpoint chain replaces
everything before it, so the cost depends on the turns after the checkpoint only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from backend.models import Attachment, Conversation, Message, MessageStatus, Role
from backend.services.conversations import LineageLevel, lineage
from chat_shell.contracts import ChainMessage, ChainMetadata


def user_entry_id(conversation_id: int, message_id: int) -> str:
    return f"u{conversation_id}-{message_id}"


def partial_entry_id(conversation_id: int, message_id: int) -> str:
    return f"a{conversation_id}-{message_id}"


def _level_clause(level: LineageLevel, after: int, before: int | None) -> Any:
    clause = (Message.conversation_id == level.conversation_id) & (Message.message_id > max(level.low, after))
    if level.high is not None:
        clause &= Message.message_id <= level.high
    if before is not None:
        clause &= Message.message_id < before
    return clause


async def latest_checkpoint(
    db: AsyncSession, levels: Sequence[LineageLevel], before_message_id: int | None
) -> Message | None:
    """The newest assistant message of any status whose chain holds a summary checkpoint."""
    for level in levels:
        found = await db.scalar(
            select(Message)
            .where(_level_clause(level, 0, before_message_id), Message.has_checkpoint.is_(True))
            .order_by(Message.message_id.desc())
            .limit(1)
        )
        if found is not None:
            return found
    return None


async def rows_after(
    db: AsyncSession, levels: Sequence[LineageLevel], after: int, before: int | None, limit: int | None
) -> list[Message]:
    """Rows with `after < message_id < before` along the lineage, oldest first; the newest
    `limit` of them when a limit is given."""
    found: list[Message] = []
    for level in levels:
        if level.high is not None and level.high <= after:
            break
        stmt = select(Message).where(_level_clause(level, after, before)).order_by(Message.message_id.desc())
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
    """The self-contained checkpoint: from the summary message to the end of the chain."""
    for index, entry in enumerate(chain):
        if entry.metadata.summary_compacted:
            return chain[index:]
    return chain


def _source(message: Message, **extra: Any) -> ChainMetadata:
    return ChainMetadata(
        source_conversation_id=message.conversation_id,
        source_message_id=message.message_id,
        source_status=message.status,
        **extra,
    )


def expand(message: Message, attachment_ids: Sequence[int]) -> list[ChainMessage]:
    """The model-visible messages one user-visible row contributes."""
    if message.role == Role.USER:
        return [
            ChainMessage(
                role="user",
                content=message.content,
                id=user_entry_id(message.conversation_id, message.message_id),
                metadata=_source(message, attachment_ids=list(attachment_ids) or None),
            )
        ]
    chain = stored_chain(message)
    partial = str((message.result or {}).get("value") or "")
    if message.status == MessageStatus.COMPLETED:
        if chain:
            return chain
        return (
            [
                ChainMessage(
                    role="assistant",
                    content=partial,
                    id=partial_entry_id(message.conversation_id, message.message_id),
                    metadata=_source(message),
                )
            ]
            if partial
            else []
        )
    # A failed, cancelled or interrupted turn contributes what it finished (complete tool pairs,
    # kept by the finalizer) and the partial text the user saw.
    ends_with_partial = bool(chain) and chain[-1].role == "assistant" and chain[-1].content == partial
    if partial and not ends_with_partial:
        chain.append(
            ChainMessage(
                role="assistant",
                content=partial,
                id=partial_entry_id(message.conversation_id, message.message_id),
                metadata=_source(message),
            )
        )
    return chain


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
) -> list[ChainMessage]:
    """The model-visible history of `conversation` (fork lineage included) before a message.

    With `from_latest_compaction`, the newest checkpoint chain (of an assistant message of any
    status) opens the history and only later rows are read; `limit` counts rows after the
    checkpoint and never cuts the checkpoint chain.
    """
    if limit is not None and limit <= 0:
        return []
    levels = await lineage(db, conversation)
    checkpoint = await latest_checkpoint(db, levels, before_message_id) if from_latest_compaction else None
    after = checkpoint.message_id if checkpoint is not None else 0
    rows = await rows_after(db, levels, after, before_message_id, limit)
    attachments = await _attachment_ids(db, rows)
    history = checkpoint_slice(stored_chain(checkpoint)) if checkpoint is not None else []
    for row in rows:
        history.extend(expand(row, attachments.get(row.id, [])))
    return history
