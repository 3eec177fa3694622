"""What chat_shell asks of its host: the pages, images and history records it reads back."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from chat_shell.contracts.history import ChainMessage
from chat_shell.contracts.wire import AttachmentRef

# The most characters one HTTP text read returns (attachment text, a message's text); readers
# that need more ask again from `next_offset`.
MAX_TEXT_PAGE_CHARS = 1_000_000
# The most messages one `list_history` page (and the outline endpoint) returns.
MAX_OUTLINE_ITEMS = 50


class AttachmentPage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attachment_id: int
    offset: int
    text: str
    next_offset: int
    total_chars: int
    has_more: bool
    truncated_at_parse: bool = False


# The image attachments a model that accepts images is shown: the types every such provider
# takes, up to a size they all accept (larger ones are described, as for other models).
MODEL_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
MAX_MODEL_IMAGE_BYTES = 5 * 1024 * 1024
# The content parts that carry a picture (OpenAI's, LangChain's standard and the Responses API's).
IMAGE_PART_TYPES = frozenset({"image_url", "image", "input_image"})


def shows_as_image(ref: AttachmentRef) -> bool:
    """Whether a model that accepts images is shown `ref` as a picture."""
    return (
        ref.status == "ready"
        and ref.kind == "image"
        and ref.mime_type in MODEL_IMAGE_TYPES
        and 0 < ref.size_bytes <= MAX_MODEL_IMAGE_BYTES
    )


class AttachmentImage(BaseModel):
    """An image attachment's bytes, for a model that accepts images (base64, as providers take it)."""

    model_config = ConfigDict(extra="forbid")

    attachment_id: int
    mime_type: str
    data_base64: str


class ModelHistory(BaseModel):
    """The model-visible history of a conversation (SPEC 6.2), as the history endpoint sends it."""

    model_config = ConfigDict(extra="forbid")

    conversation_id: int
    # The assistant message whose checkpoint chain opens `messages` (None: no checkpoint used).
    checkpoint_message_id: int | None = None
    messages: list[ChainMessage]


class OriginalMessage(BaseModel):
    """Which message of the user-visible record an answer is about."""

    model_config = ConfigDict(extra="forbid")

    message_id: int
    role: Literal["user", "assistant"]
    status: str
    created_at: datetime


class OriginalSummary(OriginalMessage):
    """One message of the user-visible record, as `list_history` shows it."""

    # Characters of the message's readable text (what `read_message` pages through).
    chars: int
    # The start of that text, whitespace collapsed, bounded.
    snippet: str
    # At or before the latest compaction checkpoint: the model sees it only through the summary
    # (or as a retained copy).
    summarized: bool


class OriginalsPage(BaseModel):
    """Messages before a point of the user-visible record, oldest first."""

    model_config = ConfigDict(extra="forbid")

    items: list[OriginalSummary]
    # Pass as `before_message_id` to continue further back; None when nothing older exists.
    next_before_message_id: int | None = None


class OriginalText(OriginalMessage):
    """A page of one user-visible message's readable text, by character offset (code points)."""

    offset: int
    text: str
    next_offset: int
    total_chars: int
    has_more: bool
