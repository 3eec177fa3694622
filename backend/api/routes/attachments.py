"""Attachments: upload (streamed, size-limited), metadata, download, extracted text, delete.

Every endpoint answers 404 for another user's attachment, exactly as for a missing one.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Query, Request, status
from fastapi.responses import FileResponse

from backend.api.deps import Ctx, CurrentUser, Db
from backend.api.params import AttachmentId, Offset
from backend.models.base import MAX_BIG_ID
from backend.schemas.attachments import AttachmentOut
from backend.services.attachments import attachments
from backend.services.attachments.uploads import CONVERSATION_FIELD, FILE_FIELD
from backend.services.errors import NotFound
from chat_shell.contracts import AttachmentPage

router = APIRouter(prefix="/api/attachments", tags=["attachments"])
MAX_TEXT_PAGE = 100_000
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


@router.post(
    "", status_code=status.HTTP_201_CREATED, response_model=AttachmentOut, openapi_extra=_UPLOAD_BODY
)
async def upload_attachment(
    request: Request,
    user: CurrentUser,
    db: Db,
    ctx: Ctx,
    conversation_id: Annotated[int | None, Query(ge=1, le=MAX_BIG_ID)] = None,
) -> AttachmentOut:
    """Multipart field `file` (and optionally `conversation_id`, as a field or query parameter).

    The body is streamed to disk; the size limit applies while receiving (413
    `upload_too_large`, nothing stored). Text is extracted before the response.
    """
    # Authentication may have written (token last-use); end that transaction now so a long
    # upload never holds a database write lock. Rows are written in short transactions.
    await db.commit()
    headers = request.headers
    row = await attachments.upload(
        ctx.sessions,
        ctx.settings,
        ctx.extraction,
        user,
        conversation_id,
        headers.get("content-type", ""),
        headers.get("content-length"),
        request.stream(),
    )
    return AttachmentOut.model_validate(row)


@router.get("/{attachment_id}", response_model=AttachmentOut)
async def get_attachment(attachment_id: AttachmentId, user: CurrentUser, db: Db) -> AttachmentOut:
    return AttachmentOut.model_validate(await attachments.get_owned(db, user, attachment_id))


@router.get("/{attachment_id}/download", response_class=FileResponse)
async def download_attachment(
    attachment_id: AttachmentId, user: CurrentUser, db: Db, ctx: Ctx
) -> FileResponse:
    """The original bytes, always as a download (never rendered inline by the browser)."""
    row = await attachments.get_owned(db, user, attachment_id)
    path = attachments.absolute(ctx.settings, row.storage_path)
    if not await asyncio.to_thread(path.is_file):
        raise NotFound.of("attachment file")
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
    offset: Offset = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_TEXT_PAGE)] = 20_000,
) -> AttachmentPage:
    """A page of the extracted text by character offset (code points, never a split character)."""
    row = await attachments.get_owned(db, user, attachment_id)
    return await attachments.text_page(ctx.settings, row, offset, limit)


@router.delete("/{attachment_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_attachment(attachment_id: AttachmentId, user: CurrentUser, db: Db, ctx: Ctx) -> None:
    """Removes the file and its text. If it was already sent, the message keeps listing it as
    deleted (name and size), and the model is told it was deleted."""
    await attachments.delete(db, ctx.settings, await attachments.get_owned(db, user, attachment_id))
