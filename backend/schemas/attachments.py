"""Bodies of the attachment endpoints."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel


class AttachmentOut(BaseModel):
    id: int
    filename: str
    mime_type: str
    kind: str | None
    size_bytes: int
    sha256: str | None
    status: str
    conversation_id: int | None
    sent: bool
    extracted_chars: int
    truncated_at_parse: bool
    note: str | None
    parse_notes: dict[str, Any]
    download_url: str
    created_at: datetime
