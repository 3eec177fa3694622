"""Request and response bodies of the conversation and message endpoints."""

from __future__ import annotations

import unicodedata
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


def _clean_title(value: str) -> str:
    # Control characters (not bidi or joiner marks) never reach storage; blank titles are rejected.
    cleaned = "".join(ch for ch in value if unicodedata.category(ch) != "Cc").strip()
    if not cleaned:
        raise ValueError("title must not be empty")
    return cleaned


class ConversationCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str = Field(default="New conversation", max_length=200)
    model_profile: str | None = Field(default=None, max_length=100)

    _title = field_validator("title")(_clean_title)


class ConversationUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str | None = Field(default=None, max_length=200)
    model_profile: str | None = Field(default=None, max_length=100)

    @field_validator("title")
    @classmethod
    def _title(cls, value: str | None) -> str | None:
        return None if value is None else _clean_title(value)


class ForkRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # 0 forks before the first message (editing the first message inherits nothing).
    message_id: int = Field(ge=0)
    title: str | None = Field(default=None, max_length=200)


class ForkedFrom(BaseModel):
    conversation_id: int
    message_id: int


class ConversationOut(BaseModel):
    id: int
    title: str
    model_profile: str | None
    created_at: datetime
    updated_at: datetime
    forked_from: ForkedFrom | None
    running_turn_id: int | None = None


class ConversationPage(BaseModel):
    items: list[ConversationOut]
    next_cursor: str | None


class AttachmentSummary(BaseModel):
    id: int
    filename: str
    mime_type: str
    size_bytes: int
    status: str
    # Deleted by its owner after it was sent: the message still lists it, without content.
    deleted: bool = False


class MessageOut(BaseModel):
    """The user-visible view of a message (SPEC 2); never the model-visible chain."""

    conversation_id: int
    message_id: int
    role: str
    status: str
    content: str
    result: dict[str, Any] | None
    attachments: list[AttachmentSummary] = []
    created_at: datetime
    updated_at: datetime


class MessagePage(BaseModel):
    items: list[MessageOut]
    has_more: bool


class SendMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str = Field(default="", max_length=200_000)
    attachment_ids: list[int] = Field(default_factory=list, max_length=100)


class TurnStartedOut(BaseModel):
    turn_id: int
    user_message: MessageOut
    assistant_message: MessageOut
    conversation: ConversationOut | None = None


class StopOut(BaseModel):
    turn_id: int
    status: str
