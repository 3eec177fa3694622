"""Conversations: ownership, listing, renaming, deleting and forking."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, literal, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from backend.models import Conversation, Message, MessageStatus, Role, TitleSource, Turn, TurnStatus, User
from backend.models.base import MAX_BIG_ID, utcnow
from backend.schemas.conversations import ConversationOut, ConversationPage
from backend.services.conversations.lineage import find_visible_message, lineage
from backend.services.decimals import ascii_decimal
from backend.services.errors import Conflict, Invalid, Malformed, NotFound
from backend.services.model_catalog import ModelCatalog


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
        raise NotFound.of("conversation")
    return conversation


def _instructions(text: str | None) -> str | None:
    return text if text and text.strip() else None


async def create(
    db: AsyncSession,
    user: User,
    title: str,
    model_profile: str | None,
    catalog: ModelCatalog,
    instructions: str | None = None,
    *,
    title_source: TitleSource = TitleSource.USER,
) -> Conversation:
    """A new conversation; its model, when it names one, must be configured (`unknown_model`)."""
    if model_profile is not None:
        catalog.resolve(model_profile)
    conversation = Conversation(
        owner_id=user.id,
        title=title,
        title_source=title_source,
        model_profile=model_profile,
        instructions=_instructions(instructions),
    )
    db.add(conversation)
    await db.flush()
    return conversation


def _encode_cursor(conversation: Conversation) -> str:
    pinned = int(conversation.pinned_at is not None)
    key = f"{pinned}|{conversation.updated_at.isoformat()}|{conversation.id}"
    return base64.urlsafe_b64encode(key.encode()).decode()


def _decode_cursor(cursor: str) -> tuple[int, datetime, int]:
    try:
        pinned, _, rest = base64.urlsafe_b64decode(cursor.encode()).decode().partition("|")
        stamp, _, ident = rest.partition("|")
        conversation_id = ascii_decimal(ident, maximum=MAX_BIG_ID)
        if conversation_id is not None and pinned in ("0", "1"):
            return int(pinned), datetime.fromisoformat(stamp), conversation_id
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise Malformed("invalid_cursor", "the paging cursor is not valid")


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


async def list_page(
    db: AsyncSession,
    user: User,
    limit: int,
    cursor: str | None,
    query: str | None,
    archived: bool = False,
) -> tuple[list[Conversation], str | None]:
    """Pinned ones first, then newest first (by last activity), keyset-paged so deep pages cost
    what the first costs; the archived ones instead of the others when `archived`."""
    stmt = select(Conversation).where(
        Conversation.owner_id == user.id,
        Conversation.deleted_at.is_(None),
        Conversation.archived_at.is_not(None) if archived else Conversation.archived_at.is_(None),
    )
    if query:
        stmt = stmt.where(Conversation.title.ilike(f"%{_escape_like(query)}%", escape="\\"))
    # The pin is the leading sort key, so the cursor carries it: a page boundary inside the
    # pinned group continues there, one past it continues among the others.
    pinned = case((Conversation.pinned_at.is_not(None), 1), else_=0)
    if cursor:
        was_pinned, updated_at, ident = _decode_cursor(cursor)
        stmt = stmt.where(
            tuple_(pinned, Conversation.updated_at, Conversation.id)
            < tuple_(literal(was_pinned), updated_at, ident)
        )
    rows = list(
        await db.scalars(
            stmt.order_by(pinned.desc(), Conversation.updated_at.desc(), Conversation.id.desc()).limit(
                limit + 1
            )
        )
    )
    next_cursor = _encode_cursor(rows[limit - 1]) if len(rows) > limit else None
    return rows[:limit], next_cursor


async def running_turns(db: AsyncSession, conversation_ids: Sequence[int]) -> dict[int, int]:
    """The running turn of each of these conversations that has one."""
    if not conversation_ids:
        return {}
    rows = await db.execute(
        select(Turn.conversation_id, Turn.id).where(
            Turn.conversation_id.in_(conversation_ids), Turn.status == TurnStatus.RUNNING
        )
    )
    return {conversation_id: turn_id for conversation_id, turn_id in rows}


async def running_turns_of(db: AsyncSession, owner_id: int) -> list[int]:
    """The running turns of every conversation of `owner_id`."""
    rows = await db.scalars(
        select(Turn.id)
        .join(Conversation, Conversation.id == Turn.conversation_id)
        .where(Conversation.owner_id == owner_id, Turn.status == TurnStatus.RUNNING)
    )
    return list(rows)


async def page(
    db: AsyncSession, user: User, limit: int, cursor: str | None, query: str | None, archived: bool = False
) -> ConversationPage:
    rows, next_cursor = await list_page(db, user, limit, cursor, query, archived)
    running = await running_turns(db, [row.id for row in rows])
    return ConversationPage(
        items=[ConversationOut.of(row, running.get(row.id)) for row in rows], next_cursor=next_cursor
    )


async def shown(db: AsyncSession, conversation: Conversation) -> ConversationOut:
    """The conversation as the API shows it, with its running turn if one is."""
    running = await running_turns(db, [conversation.id])
    return ConversationOut.of(conversation, running.get(conversation.id))


def update(conversation: Conversation, changes: dict[str, Any], catalog: ModelCatalog) -> None:
    """Applies the fields a client sent, as the route's body model validated them (a title of
    None is no change; a model of None clears it, so the default model answers; another must
    be configured; blank instructions clear them; `pinned` and `archived` set or clear their
    mark, and an archived one is never pinned). None of them is activity:
    `updated_at`, and so the conversation's place in the list, stays."""
    if changes.get("model_profile") is not None:
        catalog.resolve(changes["model_profile"])
    if changes.get("title") is not None:
        conversation.title = str(changes["title"])
        conversation.title_source = TitleSource.USER  # a name the owner chose is never replaced
    if "model_profile" in changes:
        conversation.model_profile = changes["model_profile"]
    if "instructions" in changes:
        conversation.instructions = _instructions(changes["instructions"])
    # Archiving unpins: an archived conversation is out of the list its pin orders.
    for flag, column in (("archived", "archived_at"), ("pinned", "pinned_at")):
        wanted = changes.get(flag)
        if wanted is not None and wanted != (getattr(conversation, column) is not None):
            setattr(conversation, column, utcnow() if wanted else None)
    if conversation.archived_at is not None:
        conversation.pinned_at = None


async def soft_delete(db: AsyncSession, conversation: Conversation) -> None:
    conversation.deleted_at = utcnow()


# The settings a fork starts with, as its source has them (its messages are the source's up to
# the fork point; pinning, archiving and the title's origin start afresh).
FORK_KEEPS = ("model_profile", "mcp_servers", "mcp_ask_first", "instructions")

# How long after a delete its undo still works; the browser offers it for a few seconds, the
# rest is slack for a slow network.
RESTORE_WINDOW = timedelta(minutes=5)


async def restore(db: AsyncSession, user: User, conversation_id: int) -> Conversation:
    """Undoes a delete of the last `RESTORE_WINDOW`; an older delete, or one of someone else's
    conversations, is "not found"."""
    conversation = await db.scalar(
        select(Conversation).where(
            Conversation.id == conversation_id,
            Conversation.owner_id == user.id,
            Conversation.deleted_at >= utcnow() - RESTORE_WINDOW,
        )
    )
    if conversation is None:
        raise NotFound.of("conversation")
    conversation.deleted_at = None
    return conversation


async def fork(
    db: AsyncSession, user: User, conversation: Conversation, message_id: int, title: str | None
) -> Conversation:
    # Fork point 0 inherits nothing; otherwise the fork's path goes on from the fork point.
    message = None
    if message_id > 0:
        message = await find_visible_message(db, await lineage(db, conversation), message_id)
        if message is None:
            raise NotFound.of("message")
        if message.role == Role.ASSISTANT and message.status in (
            MessageStatus.RUNNING,
            MessageStatus.PENDING,
        ):
            raise Conflict("message_not_finished", "wait for the reply to finish before forking at it")
    child = Conversation(
        owner_id=user.id,
        title=title or conversation.title,
        **{setting: getattr(conversation, setting) for setting in FORK_KEEPS},
        forked_from_conversation_id=conversation.id,
        forked_from_message_id=message_id,
        next_message_id=message_id + 1,
        current_leaf_pk=message.id if message is not None else None,
    )
    db.add(child)
    await db.flush()
    return child


async def visible_message(db: AsyncSession, conversation: Conversation, message_id: int) -> Message:
    message = await find_visible_message(db, await lineage(db, conversation), message_id)
    if message is None:
        raise NotFound.of("message")
    return message


async def question_to_answer(db: AsyncSession, conversation: Conversation, message_id: int | None) -> Message:
    """The user message a new version of a reply answers: the question of reply `message_id`
    (or that question itself), else of the current path's last reply; a path that ends in a
    question (a fork at it) answers that one."""
    if message_id is not None:
        target: Message | None = await visible_message(db, conversation, message_id)
    elif conversation.current_leaf_pk is not None:
        target = await db.get(Message, conversation.current_leaf_pk)
    else:
        target = None
    if target is not None and target.role == Role.ASSISTANT:
        target = await db.get(Message, target.parent_pk) if target.parent_pk is not None else None
    if target is None or target.role != Role.USER:
        raise Conflict("nothing_to_regenerate", "there is no message to answer again")
    return target


async def question_to_edit(db: AsyncSession, conversation: Conversation, message_id: int) -> Message:
    message = await visible_message(db, conversation, message_id)
    if message.role != Role.USER:
        raise Invalid("not_a_question", "only your own messages can be edited")
    return message
