"""Read-only share links of a conversation (issue 22): a snapshot of its current path."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from backend.models.base import Base, BigId, UtcDateTime, utcnow


class ShareLink(Base):
    """Anyone with `token` reads the path that ended at `leaf_pk` when the link was made (what
    the owner saw then, never what they send later), until the owner revokes it."""

    __tablename__ = "share_links"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    # 256 random bits (URL-safe): the link is the only secret, so it cannot be guessed.
    token: Mapped[str] = mapped_column(String(64), unique=True)
    conversation_id: Mapped[int] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    leaf_pk: Mapped[int] = mapped_column(BigId)
    include_attachments: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
