"""The `AttachmentReader` of package mode: chat_shell reads extracted text straight from the
database and the extract files, scoped to one conversation.

An attachment is readable in a conversation when its owner owns the conversation and it was
uploaded for or sent in that conversation, or sent in an ancestor before the fork point (a fork
inherits those messages). Anything else, deleted attachments included, raises `Unavailable`
(a `LookupError`, 404 `attachment_unavailable` over HTTP) with a message the model can act on;
unknown ids and other conversations' ids read alike.
"""

from __future__ import annotations

import asyncio
import base64

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.models import Attachment, AttachmentStatus, Conversation, Message
from backend.services.attachments import attachments as attachment_service
from backend.services.conversations.lineage import lineage
from backend.services.errors import NotFound
from backend.settings import Settings
from chat_shell.contracts import AttachmentImage, AttachmentPage, AttachmentRef, shows_as_image


class Unavailable(NotFound):
    """The attachment cannot be read here; the message says why (the model is shown it)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="attachment_unavailable")


class DatabaseAttachmentReader:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], settings: Settings) -> None:
        self._sessions = sessions
        self._settings = settings

    async def describe(self, conversation_id: int, attachment_id: int) -> AttachmentRef:
        return attachment_service.attachment_ref(await self._load(conversation_id, attachment_id))

    async def read(
        self, conversation_id: int, attachment_id: int, offset: int, limit_chars: int
    ) -> AttachmentPage:
        if offset < 0 or limit_chars < 0:
            raise ValueError("offset and limit must not be negative")
        row = self._readable(await self._load(conversation_id, attachment_id))
        return await attachment_service.read_page(self._settings, row, offset, limit_chars)

    async def tail(self, conversation_id: int, attachment_id: int, chars: int) -> str:
        row = self._readable(await self._load(conversation_id, attachment_id))
        start = max(0, row.extracted_chars - max(0, chars))
        return await attachment_service.read_text(self._settings, row, start, row.extracted_chars - start)

    async def image(self, conversation_id: int, attachment_id: int) -> AttachmentImage:
        row = await self._load(conversation_id, attachment_id)
        ref = attachment_service.attachment_ref(row)
        if not shows_as_image(ref):
            raise Unavailable(
                f"attachment {row.id} ({row.filename}) cannot be shown as an image "
                f"({ref.mime_type}, {ref.size_bytes:,} bytes)"
            )
        path = attachment_service.absolute(self._settings, row.storage_path)
        try:
            data = await asyncio.to_thread(path.read_bytes)
        except OSError:
            raise Unavailable(f"attachment {row.id} ({row.filename}): its file is missing") from None
        return AttachmentImage(
            attachment_id=row.id, mime_type=ref.mime_type, data_base64=base64.b64encode(data).decode("ascii")
        )

    @staticmethod
    def _readable(row: Attachment) -> Attachment:
        if row.status == AttachmentStatus.UPLOADING:
            raise Unavailable(f"attachment {row.id} ({row.filename}) is still being processed")
        if row.status == AttachmentStatus.FAILED:
            reason = (row.parse_notes or {}).get("error", "unknown reason")
            raise Unavailable(f"attachment {row.id} ({row.filename}) has no extracted text: {reason}")
        return row

    async def _load(self, conversation_id: int, attachment_id: int) -> Attachment:
        # One query on the hot path (previews read head and tail of many attachments): the
        # attachment, if the conversation exists and has the same owner.
        owner = (
            select(Conversation.owner_id)
            .where(Conversation.id == conversation_id, Conversation.deleted_at.is_(None))
            .scalar_subquery()
        )
        async with self._sessions() as db:
            row = await db.scalar(
                select(Attachment).where(Attachment.id == attachment_id, Attachment.owner_id == owner)
            )
            if row is None or not await _belongs(db, conversation_id, row):
                raise Unavailable(
                    f"attachment {attachment_id} is not available in this conversation "
                    "(unknown id, or attached to another conversation)"
                )
        if row.deleted_at is not None:
            raise Unavailable(
                f"attachment {attachment_id} ({row.filename}) was deleted by its owner; "
                "its content is no longer available"
            )
        return row


async def _belongs(db: AsyncSession, conversation_id: int, row: Attachment) -> bool:
    if row.conversation_id == conversation_id:
        return True
    if row.conversation_id is None or row.message_pk is None:
        return False
    conversation = await db.get_one(Conversation, conversation_id)
    for level in (await lineage(db, conversation))[1:]:
        if level.conversation_id == row.conversation_id:
            message_id = await db.scalar(select(Message.message_id).where(Message.id == row.message_pk))
            return message_id is not None and level.low < message_id <= (level.high or message_id)
    return False
