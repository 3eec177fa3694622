"""The user-visible messages of a conversation (SPEC 2): the current path (fork ancestors
included), as the page, the export and the history tools read them."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.models import Attachment, Conversation, Message
from backend.schemas.conversations import MessageOut, MessagePage
from backend.services.conversations import branches

# Messages per query when a whole transcript is read.
TRANSCRIPT_PAGE = 500


async def visible_messages(
    db: AsyncSession, conversation: Conversation, before_message_id: int | None, limit: int
) -> tuple[list[Message], bool]:
    """The newest `limit` messages of the current path before `before_message_id` (the path
    crosses into fork ancestors), oldest first, and whether older ones exist."""
    start = await branches.start_before(db, conversation, before_message_id)
    path = await branches.steps(db, start, limit=limit + 1)
    rows = await branches.load(db, path[:limit])
    return list(reversed(rows)), len(path) > limit


async def attachments_by_message(db: AsyncSession, rows: Sequence[Message]) -> dict[int, list[Attachment]]:
    """The files each message was sent with (an edited question: those of the one it edits)."""
    if not rows:
        return {}
    found: dict[int, list[Attachment]] = {}
    attachments = await db.scalars(
        select(Attachment)
        .where(Attachment.message_pk.in_({row.files_pk for row in rows}))
        .order_by(Attachment.id)
    )
    for attachment in attachments:
        found.setdefault(attachment.message_pk or 0, []).append(attachment)
    return {row.id: found.get(row.files_pk, []) for row in rows}


async def shown(db: AsyncSession, rows: Sequence[Message]) -> list[MessageOut]:
    """The messages as the API shows them, each with the files it was sent with and, where it
    has siblings, its versions."""
    files = await attachments_by_message(db, rows)
    versions = await branches.versions(db, rows)
    return [MessageOut.of(row, files.get(row.id, ()), versions.get(row.id)) for row in rows]


async def page(
    db: AsyncSession, conversation: Conversation, before_message_id: int | None, limit: int
) -> MessagePage:
    rows, has_more = await visible_messages(db, conversation, before_message_id, limit)
    return MessagePage(items=await shown(db, rows), has_more=has_more)


async def transcript(db: AsyncSession, conversation: Conversation) -> list[MessageOut]:
    """Every user-visible message of the current path, oldest first, read page by page."""
    pages: list[list[Message]] = []
    before: int | None = None
    while True:
        rows, has_more = await visible_messages(db, conversation, before, TRANSCRIPT_PAGE)
        pages.append(rows)
        if not has_more or not rows:
            break
        before = rows[0].message_id
    return await shown(db, [message for rows in reversed(pages) for message in rows])


async def reread(sessions: async_sessionmaker[AsyncSession], message: Message) -> MessageOut:
    """`message` as it is stored now (a reply that finished after it was first read)."""
    async with sessions() as db:
        return MessageOut.of(await db.get_one(Message, message.id))
