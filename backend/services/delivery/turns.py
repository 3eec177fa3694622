"""Starting a turn (its messages first) and storing a stop; how a turn ends is stored by
`turn_endings`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from backend.models import (
    Attachment,
    Conversation,
    Message,
    MessageStatus,
    Role,
    TitleSource,
    Turn,
    TurnStatus,
    User,
)
from backend.models.base import utcnow
from backend.services.accounts import auth
from backend.services.attachments import attachments
from backend.services.conversations.conversations import running_turns
from backend.services.dashboard import rollups
from backend.services.errors import Conflict, Invalid, RateLimited, Unavailable

# A turn refused past the service's capacity is asked again after this many seconds.
AT_CAPACITY_RETRY_SECONDS = 3


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
    """Records a stop request on a running turn (a worker that takes it from the queue later
    finds it, and ends it at once)."""
    await db.execute(
        update(Turn)
        .where(Turn.id == turn_id, Turn.status == TurnStatus.RUNNING, Turn.stop_requested_at.is_(None))
        .values(stop_requested_at=utcnow())
    )


async def load_started(db: AsyncSession, turn_id: int, *, running: bool = True) -> StartedTurn | None:
    """A turn as its start returned it (a worker takes it from the queue); with `running`,
    None once it has ended (stopped before a worker took it, or recovered)."""
    turn = await db.get(Turn, turn_id)
    if turn is None or (running and turn.status != TurnStatus.RUNNING):
        return None
    question = await db.get(Message, turn.user_message_pk)
    reply = await db.get(Message, turn.assistant_message_pk)
    conversation = await db.get(Conversation, turn.conversation_id)
    if question is None or reply is None or conversation is None:
        return None
    linked = await attachments.sent_with(db, question)
    return StartedTurn(
        turn.id,
        conversation.id,
        conversation.owner_id,
        question,
        reply,
        tuple(linked),
        awaits_title=conversation.title_source == TitleSource.FALLBACK,
    )


async def require_capacity(db: AsyncSession, capacity: int | None) -> None:
    """Admission: past `capacity` turns running in the whole service, a new one is refused
    (503 with Retry-After), so the replies already admitted keep their pace."""
    if capacity is None:
        return
    running = await db.scalar(select(func.count(Turn.id)).where(Turn.status == TurnStatus.RUNNING)) or 0
    if running >= capacity:
        raise Unavailable(
            "at_capacity",
            f"The service is writing as many replies as it can at once ({running}); yours is sent "
            "in a few seconds.",
            retry_after=AT_CAPACITY_RETRY_SECONDS,
        )


async def start_turn(
    db: AsyncSession,
    user: User,
    conversation: Conversation,
    content: str,
    attachment_ids: Sequence[int],
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
    return await _begin(db, user, conversation, question, first + 1, linked, model_profile)


async def start_version(
    db: AsyncSession,
    user: User,
    conversation: Conversation,
    question: Message,
    model_profile: str | None,
    max_running: int | None = None,
) -> StartedTurn:
    """A new version of the reply to `question` (regenerate, retry): a running assistant
    message beside the earlier replies, and its turn; the question and its files stay."""
    await _require_idle(db, user, conversation, max_running)
    number = await _number(db, conversation, 1)
    linked = await attachments.sent_with(db, question)
    return await _begin(db, user, conversation, question, number, linked, model_profile)


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
        model_profile=model_profile,
    )
    turn.status = TurnStatus.RUNNING
    turn.started_at = utcnow()
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
