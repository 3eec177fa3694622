"""Request and response bodies of the conversation and message endpoints."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, computed_field, field_validator

from backend.models import Attachment, Conversation, Message, Preset
from backend.models.base import MAX_BIG_ID, MAX_INT

# Result fields a user may see; `messages_chain` is the model-visible view and stays internal.
USER_VISIBLE_RESULT_KEYS = (
    "value",
    "model",
    "blocks",
    "context_metrics",
    "context_compactions",
    "termination_reason",
    "usage",
    "error",
    "note",
)


def _clean_title(value: str) -> str:
    # Control characters (not bidi or joiner marks) never reach storage; blank titles are rejected.
    cleaned = "".join(ch for ch in value if unicodedata.category(ch) != "Cc").strip()
    if not cleaned:
        raise ValueError("title must not be empty")
    return cleaned


# A conversation's or a preset's instructions, in characters (the guard refuses a turn they
# leave no room in, naming them).
MAX_INSTRUCTIONS = 100_000


class ConversationCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str = Field(default="New conversation", max_length=200)
    model_profile: str | None = Field(default=None, max_length=100)
    instructions: str | None = Field(default=None, max_length=MAX_INSTRUCTIONS)
    # The title is a stand-in (the page sends the first line): after the first reply a short
    # generated one replaces it, unless the owner has renamed the conversation by then.
    generate_title: bool = False

    _title = field_validator("title")(_clean_title)


class ConversationUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str | None = Field(default=None, max_length=200)
    model_profile: str | None = Field(default=None, max_length=100)
    # An empty or blank text clears them.
    instructions: str | None = Field(default=None, max_length=MAX_INSTRUCTIONS)
    pinned: bool | None = None
    archived: bool | None = None

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
    model_config = ConfigDict(from_attributes=True)

    id: int
    title: str
    # `user`, `fallback` (a generated title is still to come) or `generated`.
    title_source: str = "user"
    model_profile: str | None
    instructions: str | None = None
    created_at: datetime
    updated_at: datetime
    running_turn_id: int | None = None
    pinned: bool = Field(default=False, validation_alias="pinned_at")
    archived: bool = Field(default=False, validation_alias="archived_at")
    forked_from_conversation_id: int | None = Field(default=None, exclude=True)
    forked_from_message_id: int | None = Field(default=None, exclude=True)

    @field_validator("pinned", "archived", mode="before")
    @classmethod
    def _stamped(cls, stamp: object) -> bool:
        return stamp is not None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def forked_from(self) -> ForkedFrom | None:
        if self.forked_from_conversation_id is None or self.forked_from_message_id is None:
            return None
        return ForkedFrom(
            conversation_id=self.forked_from_conversation_id, message_id=self.forked_from_message_id
        )

    @classmethod
    def of(cls, conversation: Conversation, running_turn_id: int | None = None) -> ConversationOut:
        shown = cls.model_validate(conversation)
        shown.running_turn_id = running_turn_id
        return shown


class ConversationPage(BaseModel):
    items: list[ConversationOut]
    next_cursor: str | None


class AttachmentSummary(BaseModel):
    """How a message lists one of its files: name, type, full size, status, deleted or not."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    filename: str
    mime_type: str
    size_bytes: int
    status: str
    # Deleted by its owner after it was sent: the message still lists it, without content.
    deleted: bool = Field(default=False, validation_alias="deleted_at")

    @field_validator("deleted", mode="before")
    @classmethod
    def _deleted(cls, deleted_at: object) -> bool:
        return deleted_at is not None


def user_visible(result: dict[str, Any] | None) -> dict[str, Any] | None:
    """The fields of a stored `result` a user may see; `messages_chain` stays internal."""
    if result is None:
        return None
    return {key: result[key] for key in USER_VISIBLE_RESULT_KEYS if key in result}


class StoredMessage(BaseModel):
    """The user-visible view of a message (SPEC 2), never the model-visible chain: what the
    REST API lists and what `turn.completed` carries."""

    model_config = ConfigDict(from_attributes=True)

    conversation_id: int
    message_id: int
    role: str
    status: str
    content: str
    result: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime

    _user_visible = field_validator("result", mode="before")(user_visible)


class MessageOut(StoredMessage):
    attachments: list[AttachmentSummary] = []
    # The `message_id`s of this message's versions (itself included), oldest first, when it
    # has siblings: a regenerated reply, an edited question.
    versions: list[int] | None = None

    @classmethod
    def of(
        cls, message: Message, attachments: Iterable[Attachment] = (), versions: list[int] | None = None
    ) -> MessageOut:
        shown = cls.model_validate(message)
        shown.attachments = [AttachmentSummary.model_validate(row) for row in attachments]
        shown.versions = versions
        return shown


class MessagePage(BaseModel):
    items: list[MessageOut]
    has_more: bool


class ConversationExport(BaseModel):
    """The user-visible transcript (SPEC 2): what the page shows, never `messages_chain`."""

    conversation: ConversationOut
    messages: list[MessageOut]
    exported_at: datetime


class SendMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str = Field(default="", max_length=200_000)
    attachment_ids: list[Annotated[int, Field(ge=1, le=MAX_BIG_ID)]] = Field(
        default_factory=list, max_length=100
    )
    # Edit and resend: the `message_id` of the question this message is a new version of (it
    # keeps that one's files and follows the same message).
    edits: int | None = Field(default=None, ge=1, le=MAX_INT)


class VersionRequest(BaseModel):
    """A message to act on: the reply to write a new version of, or the version to show."""

    model_config = ConfigDict(extra="forbid")

    message_id: int | None = Field(default=None, ge=1, le=MAX_INT)


class ShowVersion(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message_id: int = Field(ge=1, le=MAX_INT)


class TurnStartedOut(BaseModel):
    turn_id: int
    user_message: MessageOut
    assistant_message: MessageOut


class StopOut(BaseModel):
    turn_id: int
    status: str


class ApprovalDecision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # The waiting call's id, from its `approval.requested` event.
    call_id: str = Field(min_length=1, max_length=200)
    allow: bool


class ApprovalOut(BaseModel):
    turn_id: int
    call_id: str
    allowed: bool


class PresetCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100)
    instructions: str = Field(default="", max_length=MAX_INSTRUCTIONS)
    model_profile: str | None = Field(default=None, max_length=100)

    _name = field_validator("name")(_clean_title)


class PresetUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=100)
    instructions: str | None = Field(default=None, max_length=MAX_INSTRUCTIONS)
    model_profile: str | None = Field(default=None, max_length=100)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        return None if value is None else _clean_title(value)


class PresetOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    instructions: str
    model_profile: str | None
    created_at: datetime

    @classmethod
    def of(cls, preset: Preset) -> PresetOut:
        return cls.model_validate(preset)
