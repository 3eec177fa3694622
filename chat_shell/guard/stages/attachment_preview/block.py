"""The preview block inside a user message (SPEC 5.2.2): where it starts and ends, and how a
message shows one.

A message showing a preview is marked `attachment_preview` with the block's length, so a
reloaded message is never previewed twice and its block can be replaced (stricter policy,
deleted attachment) without touching what the user wrote. For a model that accepts images the
preview also holds image parts right after the block (`attachment_preview_images` of them); a
chain stores them as text placeholders, which the next render swaps back for the pictures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage

from chat_shell.messages.markers import markers, with_markers

OPENING = "<attachments count="
CLOSING = "</attachments>"
# Between the preview block and what the user wrote.
SEPARATOR = "\n\n"

Content = str | list[Any]


@dataclass(frozen=True)
class Shown:
    """What a user message shows: its preview block (None: no preview), the image parts after
    it, and its own content (what the user wrote)."""

    block: str | None
    images: tuple[Any, ...]
    own: Content


def preview_parts(message: BaseMessage) -> Shown | None:
    """The preview a user message shows and its own content.

    None when it is marked as previewed but its content no longer starts with the block its
    marker describes (another stage rewrote it): such a message must be left alone.
    """
    found = markers(message)
    content = message.content
    if not found.attachment_preview:
        return Shown(None, (), content)
    size = found.attachment_preview_chars
    if size is None:
        return None
    pictures = found.attachment_preview_images or 0
    if size == 0 and not pictures:  # not even a list of the attachments fit the budget
        return Shown("", (), content)
    rest: Content
    if isinstance(content, str):
        if pictures:
            return None
        block, rest = content[:size], content[size:]
        if rest:
            if not rest.startswith(SEPARATOR):
                return None
            rest = rest[len(SEPARATOR) :]
        images: tuple[Any, ...] = ()
    else:
        first = content[0] if content else None
        text = first.get("text") if isinstance(first, dict) and first.get("type") == "text" else None
        if not isinstance(text, str) or len(content) < 1 + pictures:
            return None
        block, images, rest = text, tuple(content[1 : 1 + pictures]), content[1 + pictures :]
        if len(block) != size:
            return None
    if block and not (block.startswith(OPENING) and block.endswith(CLOSING)):
        return None
    return Shown(block, images, rest)


def with_preview(message: BaseMessage, block: str, own: Content, images: tuple[Any, ...] = ()) -> BaseMessage:
    """A copy of `message` (same id) showing `block` and `images` in front of `own` (its own
    content, see `preview_parts`), marked `attachment_preview` with the block's length."""
    content: Content
    if images:
        mine = [{"type": "text", "text": own}] if isinstance(own, str) and own else own
        content = [{"type": "text", "text": block}, *images, *(mine or [])]
    elif not block:
        content = own
    elif isinstance(own, str):
        content = f"{block}{SEPARATOR}{own}" if own else block
    else:
        content = [{"type": "text", "text": block}, *own]
    shown = message.model_copy(update={"content": content})
    return with_markers(
        shown,
        attachment_preview=True,
        attachment_preview_chars=len(block),
        attachment_preview_images=len(images) or None,
        token_count=None,
    )
