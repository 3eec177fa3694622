"""Uploaded files and their extracted text."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from backend.models.base import Base, BigId, JsonDoc, UtcDateTime, utcnow


class AttachmentStatus(StrEnum):
    UPLOADING = "uploading"
    READY = "ready"
    FAILED = "failed"


class Attachment(Base):
    __tablename__ = "attachments"
    # Duplicate uploads of one owner find an earlier extraction to reuse.
    __table_args__ = (Index("ix_attachments_owner_sha256", "owner_id", "sha256"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    conversation_id: Mapped[int | None] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), nullable=True, index=True
    )
    # The user message it was sent with; null until sent.
    message_pk: Mapped[int | None] = mapped_column(
        ForeignKey("messages.id", ondelete="SET NULL"), nullable=True, index=True
    )
    filename: Mapped[str] = mapped_column(String(255))
    mime_type: Mapped[str] = mapped_column(String(127))
    size_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    storage_path: Mapped[str] = mapped_column(String(512))
    status: Mapped[str] = mapped_column(String(16), default=AttachmentStatus.UPLOADING)
    # Small extracts live in the row; large ones in a file next to the upload.
    extracted_text: Mapped[str | None] = mapped_column(Text, nullable=True)
    extracted_path: Mapped[str | None] = mapped_column(String(512), nullable=True)
    extracted_chars: Mapped[int] = mapped_column(Integer, default=0)
    parse_notes: Mapped[dict[str, Any] | None] = mapped_column(JsonDoc, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    # A sent attachment that its owner deleted: bytes and text are gone, the row stays so the
    # message it was sent with still shows the file's name and size (marked deleted).
    deleted_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
