"""The model-visible history (SPEC 2): `messages_chain` entries and their markers."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class TokenCount(BaseModel):
    """A cached token count of one message, valid while encoding and content hash match."""

    model_config = ConfigDict(extra="forbid")

    encoding: str
    content_hash: str
    tokens: int


class ChainMetadata(BaseModel):
    """The whitelist of markers that travel with a chain entry, over HTTP as well as in-process.

    Code recognizes summaries, retained clones and compact tool outputs by these fields only,
    never by message text.
    """

    model_config = ConfigDict(extra="forbid")

    summary_compacted: bool | None = None
    summary_version: int | None = None
    checkpoint_retained: bool | None = None
    compacted: bool | None = None
    token_count: TokenCount | None = None
    # Calibration sample of the request that produced this assistant message (SPEC 4).
    local_input_tokens: int | None = None
    provider_input_tokens: int | None = None
    profile: str | None = None
    # Where a history entry came from in the user-visible record (message_id in its conversation).
    source_conversation_id: int | None = None
    source_message_id: int | None = None
    source_status: str | None = None
    attachment_ids: list[int] | None = None
    # The content already carries the rendered preview of `attachment_ids` (SPEC 5.2.2), so a
    # reloaded message is never previewed twice; the preview is the first
    # `attachment_preview_chars` characters (of the first text part, for list content), so it can
    # be replaced (stricter policy, deleted attachment) without touching what the user wrote.
    attachment_preview: bool | None = None
    attachment_preview_chars: int | None = None
    # How many image parts of the preview follow its text part (models that accept images): the
    # preview's pictures, swapped in every turn, never part of what the user wrote.
    attachment_preview_images: int | None = None


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    name: str
    args: dict[str, Any] = Field(default_factory=dict)


class ChainMessage(BaseModel):
    """One LangChain-style message dict of the model-visible history."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] = ""
    id: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    metadata: ChainMetadata = Field(default_factory=ChainMetadata)
