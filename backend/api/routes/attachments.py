"""Attachments: upload (streamed, size-limited), metadata, download, extracted text, delete.

Every endpoint answers 404 for another user's attachment, exactly as for a missing one.
"""

from __future__ import annotations

import asyncio
import shutil
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, status
from fastapi.responses import FileResponse

from backend.api.deps import Ctx, CurrentUser, Db
from backend.api.errors import ApiError, not_found
from backend.models import Attachment, AttachmentStatus
from backend.schemas.attachments import AttachmentOut
from backend.services import attachments
from backend.services.uploads import CONVERSATION_FIELD, FILE_FIELD, receive_file
from chat_shell.contracts import AttachmentPage

router = APIRouter(prefix="/api/attachments", tags=["attachments"])
MAX_TEXT_PAGE = 100_000
# Ids are 64-bit integers in the database; a larger number is simply not found.
MAX_ID = 2**63 - 1
AttachmentId = Annotated[int, Path(ge=1, le=MAX_ID)]
_UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": [FILE_FIELD],
                    "properties": {
                        FILE_FIELD: {"type": "string", "format": "binary"},
                        CONVERSATION_FIELD: {"type": "integer"},
                    },
                }
            }
        },
    }
}


def attachment_out(row: Attachment) -> AttachmentOut:
    notes = row.parse_notes or {}
    return AttachmentOut(
        id=row.id,
        filename=row.filename,
        mime_type=row.mime_type,
        kind=notes.get("kind"),
        size_bytes=row.size_bytes,
        sha256=row.sha256,
        status=row.status,
        conversation_id=row.conversation_id,
        sent=row.message_pk is not None,
        extracted_chars=row.extracted_chars,
        truncated_at_parse=bool(notes.get("truncated_at_parse")),
        note=notes.get("note"),
        parse_notes=notes,
        download_url=f"/api/attachments/{row.id}/download",
        created_at=row.created_at,
    )


def _conversation_id(raw: str | None) -> int | None:
    if raw is None or raw.strip() == "":
        return None
    if not raw.strip().isdigit() or not 1 <= int(raw) <= MAX_ID:
        raise ApiError(422, "validation_error", f"{CONVERSATION_FIELD}: must be a conversation id")
    return int(raw)


@router.post(
    "", status_code=status.HTTP_201_CREATED, response_model=AttachmentOut, openapi_extra=_UPLOAD_BODY
)
async def upload_attachment(
    request: Request,
    user: CurrentUser,
    db: Db,
    ctx: Ctx,
    conversation_id: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
) -> AttachmentOut:
    """Multipart field `file` (and optionally `conversation_id`, as a field or query parameter).

    The body is streamed to disk; the size limit applies while receiving (413
    `upload_too_large`, nothing stored). Text is extracted before the response.
    """
    # Authentication may have written (token last-use); end that transaction now so a long
    # upload never holds a database write lock. Rows are written in short transactions below.
    await db.commit()
    settings = ctx.settings
    destination = attachments.new_upload_path(settings, user.id)
    try:
        received = await receive_file(
            request.headers.get("content-type", ""),
            request.headers.get("content-length"),
            request.stream(),
            destination,
            settings.max_upload_bytes,
        )
        target = conversation_id or _conversation_id(received.conversation_id)
        row = await attachments.ingest(ctx.sessions, settings, user, target, received)
    except BaseException:
        await asyncio.to_thread(shutil.rmtree, destination.parent, True)
        raise
    return attachment_out(row)


@router.get("/{attachment_id}", response_model=AttachmentOut)
async def get_attachment(attachment_id: AttachmentId, user: CurrentUser, db: Db) -> AttachmentOut:
    return attachment_out(await attachments.get_owned(db, user, attachment_id))


@router.get("/{attachment_id}/download", response_class=FileResponse)
async def download_attachment(
    attachment_id: AttachmentId, user: CurrentUser, db: Db, ctx: Ctx
) -> FileResponse:
    """The original bytes, always as a download (never rendered inline by the browser)."""
    row = await attachments.get_owned(db, user, attachment_id)
    path = attachments.absolute(ctx.settings, row.storage_path)
    if not await asyncio.to_thread(path.is_file):
        raise not_found("attachment file")
    return FileResponse(
        path,
        media_type=row.mime_type,
        filename=row.filename,
        content_disposition_type="attachment",
        headers={
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "default-src 'none'; sandbox",
            "Cache-Control": "private, no-cache",
        },
    )


@router.get("/{attachment_id}/text", response_model=AttachmentPage)
async def read_attachment_text(
    attachment_id: AttachmentId,
    user: CurrentUser,
    db: Db,
    ctx: Ctx,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_TEXT_PAGE)] = 20_000,
) -> AttachmentPage:
    """A page of the extracted text by character offset (code points, never a split character)."""
    row = await attachments.get_owned(db, user, attachment_id)
    if row.status != AttachmentStatus.READY:
        reason = (row.parse_notes or {}).get("error", "the attachment is still being processed")
        raise ApiError(
            409, "attachment_has_no_text", f"attachment {attachment_id} has no extracted text: {reason}"
        )
    return await attachments.read_page(ctx.settings, row, offset, limit)


@router.delete("/{attachment_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_attachment(attachment_id: AttachmentId, user: CurrentUser, db: Db, ctx: Ctx) -> None:
    """Removes the file and its text. If it was already sent, the message keeps listing it as
    deleted (name and size), and the model is told it was deleted."""
    await attachments.delete(db, ctx.settings, await attachments.get_owned(db, user, attachment_id))
