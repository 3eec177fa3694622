"""Conversations (Wegent calls them tasks) and the messages in them."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Boolean, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from backend.models.base import Base, BigId, JsonDoc, UtcDateTime, utcnow


class TitleSource(StrEnum):
    USER = "user"
    FALLBACK = "fallback"
    GENERATED = "generated"


class Conversation(Base):
    __tablename__ = "conversations"
    __table_args__ = (Index("ix_conversations_owner_updated", "owner_id", "updated_at", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    title: Mapped[str] = mapped_column(String(200))
    # `user`, `fallback` (the first line, until a generated title replaces it) or `generated`.
    title_source: Mapped[str] = mapped_column(String(16), default=TitleSource.USER, server_default="user")
    model_profile: Mapped[str | None] = mapped_column(String(100), nullable=True)
    # The conversation's own system prompt, sent after the operator's.
    instructions: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    # A fork inherits the parent's messages with message_id <= forked_from_message_id.
    forked_from_conversation_id: Mapped[int | None] = mapped_column(
        ForeignKey("conversations.id", ondelete="SET NULL"), nullable=True, index=True
    )
    forked_from_message_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The next message_id to hand out; a fork continues its parent's numbering after the fork point.
    next_message_id: Mapped[int] = mapped_column(Integer, default=1)
    # The MCP servers this conversation enabled, by name; None: the deployment's default set.
    mcp_servers: Mapped[list[str] | None] = mapped_column(JsonDoc, nullable=True)
    # MCP servers and tools (`<server>_<tool>`) whose calls wait for the user's decision.
    mcp_ask_first: Mapped[list[str] | None] = mapped_column(JsonDoc, nullable=True)
    # Soft delete: a deleted conversation disappears for its owner but forks keep their history.
    deleted_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    # Pinned: listed before the others; archived: left out of the list unless asked for.
    pinned_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    archived_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    # The newest message of the version shown (`messages.id`; a fork without messages of its
    # own: the fork point's): every read of the conversation follows the path from it to the
    # root. No foreign key: messages already reference conversations, and the value only
    # moves to a message created or chosen in the same transaction.
    current_leaf_pk: Mapped[int | None] = mapped_column(BigId, nullable=True)


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
        # Found the newest compaction checkpoint before versions in place; history now walks the
        # path to it by primary key (`branches`). Unread, kept until a migration drops it.
        Index("ix_messages_checkpoint", "conversation_id", "has_checkpoint", "message_id"),
        # The versions of a message: its parent's children in its conversation (a first
        # message's versions are the conversation's other roots).
        Index("ix_messages_parent", "conversation_id", "parent_pk", "message_id"),
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
    # The message this one answers or follows (`messages.id`; None: the first of its
    # conversation's tree). A fork's first message names the fork point in the parent
    # conversation. Siblings (the same parent) are versions: a regenerated reply, an edited
    # question. No foreign key (migration 0014: on SQLite one would rebuild this table and drop
    # its search triggers); messages go only with their conversation, and a walk up the tree
    # ends at a parent that is gone.
    parent_pk: Mapped[int | None] = mapped_column(BigId, nullable=True)
    # An edited question carries the files of the message it edits (one file, one delete).
    attachments_of_pk: Mapped[int | None] = mapped_column(BigId, nullable=True)

    @property
    def files_pk(self) -> int:
        """The message whose attachments this one was sent with."""
        return self.attachments_of_pk or self.id


class Preset(Base):
    """A user's saved start for new chats: a name, instructions and a model."""

    __tablename__ = "presets"
    __table_args__ = (UniqueConstraint("owner_id", "name", name="uq_presets_owner_name"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(100))
    instructions: Mapped[str] = mapped_column(Text, default="")
    model_profile: Mapped[str | None] = mapped_column(String(100), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
