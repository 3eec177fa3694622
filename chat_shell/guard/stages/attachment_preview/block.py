"""The preview block inside a user message (SPEC 5.2.2): where it starts and ends, and how a
message shows one.

A message showing a preview is marked `attachment_preview` with the block's length, so a
reloaded message is never previewed twice and its block can be replaced (stricter policy,
deleted attachment) without touching what the user wrote.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import BaseMessage

from chat_shell.messages.markers import markers, with_markers

OPENING = "<attachments count="
CLOSING = "</attachments>"
# Between the preview block and what the user wrote.
SEPARATOR = "\n\n"

Content = str | list[Any]


def preview_parts(message: BaseMessage) -> tuple[str | None, Content] | None:
    """The preview block a user message shows and its own content (what the user wrote).

    `(None, content)` when it shows no preview. None when it is marked as previewed but its
    content no longer starts with the block its marker describes (another stage rewrote it):
    such a message must be left alone.
    """
    found = markers(message)
    content = message.content
    if not found.attachment_preview:
        return None, content
    size = found.attachment_preview_chars
    if size is None:
        return None
    if size == 0:  # not even a list of the attachments fit the budget
        return "", content
    if isinstance(content, str):
        block, rest = content[:size], content[size:]
        if rest:
            if not rest.startswith(SEPARATOR):
                return None
            rest = rest[len(SEPARATOR) :]
    else:
        first = content[0] if content else None
        text = first.get("text") if isinstance(first, dict) and first.get("type") == "text" else None
        if not isinstance(text, str):
            return None
        block, rest = text, content[1:]
        if len(block) != size:
            return None
    if not (block.startswith(OPENING) and block.endswith(CLOSING)):
        return None
    return block, rest


def with_preview(message: BaseMessage, block: str, own: Content) -> BaseMessage:
    """A copy of `message` (same id) showing `block` in front of `own` (its own content, see
    `preview_parts`), marked `attachment_preview` with the block's length."""
    content: Content
    if not block:
        content = own
    elif isinstance(own, str):
        content = f"{block}{SEPARATOR}{own}" if own else block
    else:
        content = [{"type": "text", "text": block}, *own]
    shown = message.model_copy(update={"content": content})
    return with_markers(shown, attachment_preview=True, attachment_preview_chars=len(block), token_count=None)
