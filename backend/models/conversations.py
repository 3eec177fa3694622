"""Conversations (Wegent calls them tasks) and the messages in them."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Boolean, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from backend.models.base import Base, BigId, JsonDoc, UtcDateTime, utcnow


class Conversation(Base):
    __tablename__ = "conversations"
    __table_args__ = (Index("ix_conversations_owner_updated", "owner_id", "updated_at", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    title: Mapped[str] = mapped_column(String(200))
    model_profile: Mapped[str | None] = mapped_column(String(100), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    # A fork inherits the parent's messages with message_id <= forked_from_message_id.
    forked_from_conversation_id: Mapped[int | None] = mapped_column(
        ForeignKey("conversations.id", ondelete="SET NULL"), nullable=True, index=True
    )
    forked_from_message_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The next message_id to hand out; a fork continues its parent's numbering after the fork point.
    next_message_id: Mapped[int] = mapped_column(Integer, default=1)
    # Soft delete: a deleted conversation disappears for its owner but forks keep their history.
    deleted_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"


class MessageStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"


FINISHED_STATUSES = frozenset(
    {MessageStatus.COMPLETED, MessageStatus.FAILED, MessageStatus.CANCELLED, MessageStatus.INTERRUPTED}
)


class Message(Base):
    """One user or assistant message: the user-visible record, never rewritten by compaction.

    Assistant messages carry `result` (SPEC 3): `value`, `blocks`, `messages_chain`,
    `context_metrics`, `context_compactions`, `termination_reason`, `usage`.
    """

    __tablename__ = "messages"
    __table_args__ = (
        UniqueConstraint("conversation_id", "message_id", name="uq_messages_conversation_message"),
        # Finds the newest compaction checkpoint without reading every result document.
        Index("ix_messages_checkpoint", "conversation_id", "has_checkpoint", "message_id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"))
    message_id: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), default=MessageStatus.COMPLETED)
    content: Mapped[str] = mapped_column(Text, default="")
    result: Mapped[dict[str, Any] | None] = mapped_column(JsonDoc, nullable=True)
    has_checkpoint: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
