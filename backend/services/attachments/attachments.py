"""The attachment lifecycle: store an upload, extract its text, serve it, link it, delete it.

Storage: `<data_dir>/attachments/<owner_id>/<token>/` holds `original` (the bytes as uploaded)
and, for large extracts, `extract.txt` + `extract.idx`. Paths in the database are relative to
the data directory. User-supplied names never touch the file system.

Deleting: an attachment not yet sent is removed completely. One already sent with a message
keeps a tombstone row (name, type, size, `deleted_at`) so the message still lists the file,
marked deleted; its bytes and text are removed and every read answers 404 (the model gets a
clear "deleted" note instead of a preview).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.db import transaction
from backend.models import Attachment, AttachmentStatus, Conversation, Message, User
from backend.models.base import MAX_BIG_ID, utcnow
from backend.services.attachments.extraction import Extraction, ExtractionStopped, failed
from backend.services.attachments.extraction.sandbox import UNDETECTED, ExtractionSandbox
from backend.services.attachments.extraction.store import INDEX_NAME, TEXT_NAME, index_path, read_chars
from backend.services.attachments.uploads import CONVERSATION_FIELD, ReceivedFile, receive_file
from backend.services.conversations import conversations
from backend.services.decimals import ascii_decimal
from backend.services.errors import Conflict, Invalid, NotFound, TooLarge
from backend.settings import Settings
from chat_shell.contracts import AttachmentPage, AttachmentRef

ROOT = "attachments"
ORIGINAL_NAME = "original"


def new_upload_path(settings: Settings, owner_id: int) -> Path:
    """Where a new upload's bytes go: a fresh directory nobody else uses."""
    return settings.data_dir / ROOT / str(owner_id) / uuid.uuid4().hex / ORIGINAL_NAME


def _relative(settings: Settings, path: Path) -> str:
    return path.relative_to(settings.data_dir).as_posix()


def absolute(settings: Settings, relative: str) -> Path:
    return settings.data_dir / relative


async def upload(
    sessions: async_sessionmaker[AsyncSession],
    settings: Settings,
    extraction: ExtractionSandbox,
    owner: User,
    conversation_id: int | None,
    content_type: str,
    content_length: str | None,
    body: AsyncIterator[bytes],
) -> Attachment:
    """Receives a multipart upload (streamed, size-limited) and registers it; on any failure
    nothing of it stays on disk or in the database. `conversation_id` comes from the query,
    else from the form."""
    destination = new_upload_path(settings, owner.id)
    try:
        received = await receive_file(
            content_type, content_length, body, destination, settings.max_upload_bytes
        )
        target = conversation_id or _form_conversation_id(received.conversation_id)
        return await ingest(sessions, settings, extraction, owner, target, received)
    except BaseException:
        await asyncio.to_thread(shutil.rmtree, destination.parent, True)
        raise


def _form_conversation_id(raw: str | None) -> int | None:
    if raw is None or raw.strip() == "":
        return None
    value = ascii_decimal(raw.strip(), minimum=1, maximum=MAX_BIG_ID)
    if value is None:
        raise Invalid("validation_error", f"{CONVERSATION_FIELD}: must be a conversation id")
    return value


async def ingest(
    sessions: async_sessionmaker[AsyncSession],
    settings: Settings,
    extraction: ExtractionSandbox,
    owner: User,
    conversation_id: int | None,
    received: ReceivedFile,
) -> Attachment:
    """Register a received file: `uploading`, then text extraction in the sandbox, then
    `ready` or `failed` (with the reason in `parse_notes`; the file is kept either way). A
    duplicate of one of the owner's earlier uploads (same bytes, same detected type) reuses that
    extraction."""
    async with transaction(sessions) as db:
        if conversation_id is not None:
            await conversations.get_for_owner(db, owner.id, conversation_id)
        await _require_room(db, owner, received.size, settings.max_stored_bytes)
        row = Attachment(
            owner_id=owner.id,
            conversation_id=conversation_id,
            filename=received.filename,
            mime_type="application/octet-stream",
            size_bytes=received.size,
            sha256=received.sha256,
            storage_path=_relative(settings, received.path),
            status=AttachmentStatus.UPLOADING,
            extracted_chars=0,
        )
        db.add(row)
        await db.flush()
        twin = await _reusable_twin(db, owner.id, received, settings)
    try:
        outcome = await _extract(extraction, settings, twin, received)
    except BaseException:
        async with transaction(sessions) as db:
            await db.delete(await db.get_one(Attachment, row.id))
        await asyncio.to_thread(shutil.rmtree, received.path.parent, True)
        raise
    async with transaction(sessions) as db:
        stored = await db.get_one(Attachment, row.id)
        _apply(settings, stored, outcome)
    return stored


async def _require_room(db: AsyncSession, owner: User, size: int, max_stored_bytes: int) -> None:
    """Refuses a file that would take the owner's stored attachments (deleted ones not counted)
    past `max_stored_bytes` (413 `storage_quota_exceeded`)."""
    stored = await db.scalar(
        select(func.coalesce(func.sum(Attachment.size_bytes), 0)).where(
            Attachment.owner_id == owner.id, Attachment.deleted_at.is_(None)
        )
    )
    if (stored or 0) + size > max_stored_bytes:
        raise TooLarge(
            "storage_quota_exceeded",
            f"your files would take {(stored or 0) + size:,} bytes, more than your {max_stored_bytes:,} "
            "bytes of storage; delete some attachments first",
        )


async def _reusable_twin(
    db: AsyncSession, owner_id: int, received: ReceivedFile, settings: Settings
) -> Attachment | None:
    candidates = await db.scalars(
        select(Attachment)
        .where(
            Attachment.owner_id == owner_id,
            Attachment.sha256 == received.sha256,
            Attachment.size_bytes == received.size,
            Attachment.deleted_at.is_(None),
            Attachment.status.in_((AttachmentStatus.READY, AttachmentStatus.FAILED)),
        )
        .order_by(Attachment.id.desc())
        .limit(5)
    )
    for candidate in candidates:
        notes = candidate.parse_notes or {}
        # An extraction a sandbox limit stopped depends on the limits, which may have changed.
        if notes.get("max_chars") == settings.max_extracted_chars and "stopped_by" not in notes:
            return candidate
    return None


async def _extract(
    extraction: ExtractionSandbox, settings: Settings, twin: Attachment | None, received: ReceivedFile
) -> Extraction | Attachment:
    """The twin's extraction when the detected type matches it (the name decides among text
    kinds), else a fresh one."""
    max_chars = settings.max_extracted_chars
    detected = None
    if twin is not None:
        try:
            detected = await extraction.detect(received.path, received.filename)
        except ExtractionStopped as stopped:
            return failed(UNDETECTED, max_chars, stopped)
        if detected.mime == twin.mime_type and detected.kind == (twin.parse_notes or {}).get("kind"):
            return await asyncio.to_thread(_reuse, settings, twin, received)
    return await extraction.extract(
        received.path, received.filename, received.path.parent, max_chars, detected
    )


def _reuse(settings: Settings, twin: Attachment, received: ReceivedFile) -> Attachment:
    """Share the twin's bytes and extract through hard links (each row keeps its own links, so
    deleting one never touches the other)."""
    directory = received.path.parent
    _link(absolute(settings, twin.storage_path), received.path)
    if twin.extracted_path:
        twin_text = absolute(settings, twin.extracted_path)
        _link(twin_text, directory / TEXT_NAME)
        _link(index_path(twin_text), directory / INDEX_NAME)
    return twin


def _link(source: Path, target: Path) -> None:
    temporary = target.with_name(target.name + ".link")
    try:
        os.link(source, temporary)
    except OSError:
        shutil.copyfile(source, temporary)
    os.replace(temporary, target)


def _apply(settings: Settings, row: Attachment, outcome: Extraction | Attachment) -> None:
    if isinstance(outcome, Attachment):
        row.mime_type = outcome.mime_type
        row.status = outcome.status
        row.extracted_text = outcome.extracted_text
        row.extracted_chars = outcome.extracted_chars
        row.parse_notes = {**(outcome.parse_notes or {}), "duplicate_of": outcome.id}
        if outcome.extracted_path:
            row.extracted_path = _relative(settings, absolute(settings, row.storage_path).parent / TEXT_NAME)
        return
    row.mime_type = outcome.detected.mime
    row.status = AttachmentStatus(outcome.status)
    row.parse_notes = outcome.notes
    if outcome.stored is not None:
        row.extracted_chars = outcome.stored.chars
        row.extracted_text = outcome.stored.inline_text
        if outcome.stored.text_path is not None:
            row.extracted_path = _relative(settings, outcome.stored.text_path)


async def get_owned(db: AsyncSession, user: User, attachment_id: int) -> Attachment:
    """The user's live attachment; other users' and deleted ones answer 404 alike."""
    row = await db.scalar(
        select(Attachment).where(
            Attachment.id == attachment_id, Attachment.owner_id == user.id, Attachment.deleted_at.is_(None)
        )
    )
    if row is None:
        raise NotFound.of("attachment")
    return row


async def read_text(settings: Settings, row: Attachment, offset: int, limit: int) -> str:
    """Characters `[offset, offset + limit)` of the extracted text, in time proportional to `limit`."""
    if row.extracted_path:
        return await asyncio.to_thread(read_chars, absolute(settings, row.extracted_path), offset, limit)
    return (row.extracted_text or "")[offset : offset + limit]


async def read_page(settings: Settings, row: Attachment, offset: int, limit: int) -> AttachmentPage:
    """A page of the extracted text starting at `offset` (clamped to the end), at most `limit` long."""
    total = row.extracted_chars
    start = min(offset, total)
    text = await read_text(settings, row, start, min(limit, total - start))
    return AttachmentPage(
        attachment_id=row.id,
        offset=start,
        text=text,
        next_offset=start + len(text),
        total_chars=total,
        has_more=start + len(text) < total,
        truncated_at_parse=bool((row.parse_notes or {}).get("truncated_at_parse")),
    )


async def text_page(settings: Settings, row: Attachment, offset: int, limit: int) -> AttachmentPage:
    """A page of the extracted text for its owner; an attachment without text says why."""
    if row.status != AttachmentStatus.READY:
        reason = (row.parse_notes or {}).get("error", "the attachment is still being processed")
        raise Conflict("attachment_has_no_text", f"attachment {row.id} has no extracted text: {reason}")
    return await read_page(settings, row, offset, limit)


async def delete(db: AsyncSession, settings: Settings, row: Attachment) -> None:
    directory = absolute(settings, row.storage_path).parent
    if row.message_pk is None:
        await db.delete(row)
    else:
        row.deleted_at = utcnow()
        row.extracted_text = None
        row.extracted_path = None
        row.extracted_chars = 0
    await db.flush()
    await asyncio.to_thread(shutil.rmtree, directory, True)


async def link_to_message(
    db: AsyncSession, user: User, conversation: Conversation, message: Message, attachment_ids: Sequence[int]
) -> list[Attachment]:
    """Attach uploads to the user message being sent (the send path calls this before it starts
    the turn). Each id must be the user's live upload, not yet sent, uploaded without a
    conversation or for this one, and finished (`ready`, or `failed`: the turn proceeds and the
    model is told the text could not be extracted). Raises before changing anything."""
    wanted = list(dict.fromkeys(attachment_ids))
    rows = {
        row.id: row
        for row in await db.scalars(
            select(Attachment)
            .where(Attachment.id.in_(wanted), Attachment.owner_id == user.id, Attachment.deleted_at.is_(None))
            .with_for_update()
        )
    }
    for attachment_id in wanted:
        row = rows.get(attachment_id)
        if row is None or row.conversation_id not in (None, conversation.id):
            raise NotFound(f"attachment {attachment_id} not found (deleted or never uploaded)")
        if row.message_pk is not None:
            raise Conflict("attachment_already_sent", f"attachment {attachment_id} was already sent")
        if row.status == AttachmentStatus.UPLOADING:
            raise Conflict("attachment_not_ready", f"attachment {attachment_id} is still being processed")
    for attachment_id in wanted:
        rows[attachment_id].conversation_id = conversation.id
        rows[attachment_id].message_pk = message.id
    await db.flush()
    return [rows[attachment_id] for attachment_id in wanted]


async def sent_with(db: AsyncSession, message: Message) -> list[Attachment]:
    """The files `message` was sent with (an edited question: those of the one it edits), a
    deleted one included as its tombstone."""
    return list(
        await db.scalars(
            select(Attachment).where(Attachment.message_pk == message.files_pk).order_by(Attachment.id)
        )
    )


def attachment_ref(row: Attachment) -> AttachmentRef:
    """What chat_shell may know about an attachment without reading its text."""
    notes = row.parse_notes or {}
    return AttachmentRef(
        id=row.id,
        filename=row.filename,
        mime_type=row.mime_type,
        size_bytes=row.size_bytes,
        status=AttachmentStatus(row.status).value,
        kind=notes.get("kind"),
        extracted_chars=row.extracted_chars,
        truncated_at_parse=bool(notes.get("truncated_at_parse")),
        pages=notes.get("pages"),
        rows=notes.get("rows"),
        note=notes.get("note"),
    )
