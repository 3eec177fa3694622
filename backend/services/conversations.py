"""Conversations, fork lineage and the user-visible message history."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from backend.api.errors import ApiError, not_found
from backend.models import Attachment, Conversation, Message, MessageStatus, Role, Turn, TurnStatus, User
from backend.models.base import utcnow

MAX_FORK_DEPTH = 50
# Result fields a user may see; `messages_chain` is the model-visible view and stays internal.
USER_VISIBLE_RESULT_KEYS = (
    "value",
    "blocks",
    "context_metrics",
    "context_compactions",
    "termination_reason",
    "usage",
    "error",
    "note",
)


async def get_owned(db: AsyncSession, user: User, conversation_id: int) -> Conversation:
    return await get_for_owner(db, user.id, conversation_id)


async def get_for_owner(db: AsyncSession, owner_id: int, conversation_id: int) -> Conversation:
    """The live conversation of `owner_id`; anyone else's or a deleted one is "not found"."""
    conversation = await db.scalar(
        select(Conversation).where(
            Conversation.id == conversation_id,
            Conversation.owner_id == owner_id,
            Conversation.deleted_at.is_(None),
        )
    )
    if conversation is None:
        raise not_found("conversation")
    return conversation


async def create(db: AsyncSession, user: User, title: str, model_profile: str | None) -> Conversation:
    conversation = Conversation(owner_id=user.id, title=title, model_profile=model_profile)
    db.add(conversation)
    await db.flush()
    return conversation


def _encode_cursor(updated_at: datetime, conversation_id: int) -> str:
    return base64.urlsafe_b64encode(f"{updated_at.isoformat()}|{conversation_id}".encode()).decode()


def _decode_cursor(cursor: str) -> tuple[datetime, int]:
    try:
        stamp, _, ident = base64.urlsafe_b64decode(cursor.encode()).decode().partition("|")
        return datetime.fromisoformat(stamp), int(ident)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ApiError(400, "invalid_cursor", "the paging cursor is not valid") from None


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


async def list_page(
    db: AsyncSession, user: User, limit: int, cursor: str | None, query: str | None
) -> tuple[list[Conversation], str | None]:
    """Newest first (by last activity), keyset-paged so deep pages cost what the first costs."""
    stmt = select(Conversation).where(Conversation.owner_id == user.id, Conversation.deleted_at.is_(None))
    if query:
        stmt = stmt.where(Conversation.title.ilike(f"%{_escape_like(query)}%", escape="\\"))
    if cursor:
        updated_at, ident = _decode_cursor(cursor)
        # A row-value comparison lets both databases continue the index scan at the cursor.
        stmt = stmt.where(tuple_(Conversation.updated_at, Conversation.id) < tuple_(updated_at, ident))
    rows = list(
        await db.scalars(
            stmt.order_by(Conversation.updated_at.desc(), Conversation.id.desc()).limit(limit + 1)
        )
    )
    next_cursor = (
        _encode_cursor(rows[limit - 1].updated_at, rows[limit - 1].id) if len(rows) > limit else None
    )
    return rows[:limit], next_cursor


async def running_turns(db: AsyncSession, conversation_ids: Sequence[int]) -> dict[int, int]:
    if not conversation_ids:
        return {}
    rows = await db.execute(
        select(Turn.conversation_id, Turn.id).where(
            Turn.conversation_id.in_(conversation_ids), Turn.status == TurnStatus.RUNNING
        )
    )
    return {conversation_id: turn_id for conversation_id, turn_id in rows}


async def soft_delete(db: AsyncSession, conversation: Conversation) -> None:
    conversation.deleted_at = utcnow()


@dataclass(frozen=True)
class LineageLevel:
    """Messages of `conversation_id` with `low < message_id <= high` belong to the lineage."""

    conversation_id: int
    low: int
    high: int | None


async def lineage(db: AsyncSession, conversation: Conversation) -> list[LineageLevel]:
    """The conversation and its fork ancestors, newest range first.

    A fork numbers its own messages after its fork point, so the ranges never overlap and
    `message_id` stays monotonic along the lineage.
    """
    levels = [LineageLevel(conversation.id, conversation.forked_from_message_id or 0, None)]
    seen = {conversation.id}
    parent_id, high = conversation.forked_from_conversation_id, conversation.forked_from_message_id
    while parent_id is not None and high is not None:
        if parent_id in seen:
            raise ApiError(500, "fork_cycle", "the conversation's fork lineage has a cycle")
        if len(levels) > MAX_FORK_DEPTH:
            raise ApiError(422, "fork_too_deep", f"forks may be nested at most {MAX_FORK_DEPTH} deep")
        seen.add(parent_id)
        parent = await db.get(Conversation, parent_id)
        if parent is None:
            break
        low = parent.forked_from_message_id or 0
        levels.append(LineageLevel(parent.id, low, high))
        if parent.forked_from_message_id is not None:
            high = min(high, parent.forked_from_message_id)
        parent_id = parent.forked_from_conversation_id
    return levels


def _in_level(level: LineageLevel) -> Any:
    clause = and_(Message.conversation_id == level.conversation_id, Message.message_id > level.low)
    if level.high is not None:
        clause = and_(clause, Message.message_id <= level.high)
    return clause


async def visible_messages(
    db: AsyncSession, levels: Sequence[LineageLevel], before_message_id: int | None, limit: int
) -> tuple[list[Message], bool]:
    """The newest `limit` messages before `before_message_id` along the lineage, oldest first."""
    found: list[Message] = []
    for level in levels:
        stmt = select(Message).where(_in_level(level))
        if before_message_id is not None:
            stmt = stmt.where(Message.message_id < before_message_id)
        want = limit + 1 - len(found)
        found.extend(await db.scalars(stmt.order_by(Message.message_id.desc()).limit(want)))
        if len(found) > limit:
            break
    has_more = len(found) > limit
    return list(reversed(found[:limit])), has_more


async def find_visible_message(
    db: AsyncSession, levels: Sequence[LineageLevel], message_id: int
) -> Message | None:
    for level in levels:
        if message_id > level.low and (level.high is None or message_id <= level.high):
            return await db.scalar(
                select(Message).where(
                    Message.conversation_id == level.conversation_id, Message.message_id == message_id
                )
            )
    return None


async def attachments_by_message(db: AsyncSession, message_pks: Sequence[int]) -> dict[int, list[Attachment]]:
    if not message_pks:
        return {}
    grouped: dict[int, list[Attachment]] = {}
    rows = await db.scalars(
        select(Attachment).where(Attachment.message_pk.in_(message_pks)).order_by(Attachment.id)
    )
    for attachment in rows:
        grouped.setdefault(attachment.message_pk or 0, []).append(attachment)
    return grouped


def user_visible_result(result: dict[str, Any] | None) -> dict[str, Any] | None:
    if result is None:
        return None
    return {key: result[key] for key in USER_VISIBLE_RESULT_KEYS if key in result}


async def fork(
    db: AsyncSession, user: User, conversation: Conversation, message_id: int, title: str | None
) -> Conversation:
    # Fork point 0 inherits nothing (regenerating the first message).
    if message_id > 0:
        message = await find_visible_message(db, await lineage(db, conversation), message_id)
        if message is None:
            raise not_found("message")
        if message.role == Role.ASSISTANT and message.status in (
            MessageStatus.RUNNING,
            MessageStatus.PENDING,
        ):
            raise ApiError(409, "message_not_finished", "wait for the reply to finish before forking at it")
    child = Conversation(
        owner_id=user.id,
        title=title or conversation.title,
        model_profile=conversation.model_profile,
        forked_from_conversation_id=conversation.id,
        forked_from_message_id=message_id,
        next_message_id=message_id + 1,
    )
    db.add(child)
    await db.flush()
    return child
