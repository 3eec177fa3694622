"""`ChainMessage` <-> LangChain messages, and the initial message list of a turn.

Markers travel in `additional_kwargs["chat_shell"]` (see `markers`); nothing else of
`additional_kwargs` is kept in a chain entry. List content is stored as JSON-able blocks with
binary media replaced by a short placeholder, never as Python repr text.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from chat_shell.contracts import ChainMessage, ChainMetadata, ToolCall, TurnRequest
from chat_shell.messages import tool_images
from chat_shell.messages.markers import MARKER_KEY, markers

_MEDIA_BLOCK_TYPES = frozenset({"image", "image_url", "input_image", "audio", "input_audio", "file", "video"})
SYSTEM_PROMPT_ID = "system-prompt"
# The id of the system message when it carries the conversation's own instructions.
INSTRUCTIONS_ID = "system-instructions"
# Between the system prompt and the instructions after it, in that one system message.
INSTRUCTIONS_SEPARATOR = "\n\n"


def entry_id(role: Literal["user", "assistant"], conversation_id: int, message_id: int) -> str:
    """The id of the model-visible entry a user-visible message becomes: a user's text (`u…`),
    or the shown text of a reply that did not complete (`a…`). The same id in the turn that sends
    the message and in every later history, so token counts and calibration carry over."""
    return f"{role[0]}{conversation_id}-{message_id}"


def strip_media(content: str | list[Any]) -> str | list[dict[str, Any]]:
    """`content` with image/audio/file blocks replaced by a text placeholder (no base64 in a chain)."""
    if isinstance(content, str):
        return content
    blocks: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, str):
            blocks.append({"type": "text", "text": block})
        elif isinstance(block, dict) and block.get("type") in _MEDIA_BLOCK_TYPES:
            blocks.append({"type": "text", "text": tool_images.media_line(block)})
        elif isinstance(block, dict):
            blocks.append(block)
        else:
            blocks.append({"type": "text", "text": str(block)})
    return blocks


def tool_output_text(content: str | list[Any]) -> str:
    """A tool result as one string: text as is, a result with pictures as its text (whose
    placeholder lines describe them), other lists as JSON without media bytes."""
    if isinstance(content, str):
        return content
    if (with_images := tool_images.split(content)) is not None:
        return tool_images.described(*with_images)
    return json.dumps(strip_media(content), ensure_ascii=False)


def _metadata_kwargs(metadata: ChainMetadata) -> dict[str, Any]:
    fields = metadata.model_dump(exclude_none=True, mode="json")
    return {MARKER_KEY: fields} if fields else {}


def to_langchain(entry: ChainMessage) -> BaseMessage:
    kwargs = _metadata_kwargs(entry.metadata)
    # langchain's content type (its lists may also hold bare strings); the list is copied anyway
    # when the message validates it.
    content: str | list[str | dict[str, Any]] = (
        entry.content if isinstance(entry.content, str) else [*entry.content]
    )
    if entry.role == "assistant":
        return AIMessage(
            content=content,
            id=entry.id,
            tool_calls=[
                {"id": call.id, "name": call.name, "args": call.args, "type": "tool_call"}
                for call in entry.tool_calls
            ],
            additional_kwargs=kwargs,
        )
    if entry.role == "tool":
        if entry.tool_call_id is None:
            raise ValueError(f"tool message {entry.id!r} has no tool_call_id")
        return ToolMessage(
            content=content,
            id=entry.id,
            tool_call_id=entry.tool_call_id,
            name=entry.name,
            additional_kwargs=kwargs,
        )
    message_type = SystemMessage if entry.role == "system" else HumanMessage
    return message_type(content=content, id=entry.id, name=entry.name, additional_kwargs=kwargs)


def to_chain(message: BaseMessage) -> ChainMessage:
    """The chain entry of one message; only whitelisted markers survive."""
    metadata = markers(message)
    if isinstance(message, AIMessage):
        return ChainMessage(
            role="assistant",
            content=strip_media(message.content),
            id=message.id,
            tool_calls=[
                ToolCall(id=call["id"] or "", name=call["name"], args=call["args"])
                for call in message.tool_calls
            ],
            metadata=metadata,
        )
    if isinstance(message, ToolMessage):
        return ChainMessage(
            role="tool",
            content=tool_output_text(message.content),
            id=message.id,
            tool_call_id=message.tool_call_id,
            name=message.name,
            metadata=metadata,
        )
    role = "system" if isinstance(message, SystemMessage) else "user"
    return ChainMessage(
        role=role, content=strip_media(message.content), id=message.id, name=message.name, metadata=metadata
    )


def ahead_messages(
    history: Sequence[ChainMessage], system_prompt: str | None, instructions: str | None = None
) -> list[BaseMessage]:
    """What a turn starts from before its user message: the system prompt (with the
    conversation's instructions after it) and the model-visible history."""
    messages: list[BaseMessage] = []
    system = INSTRUCTIONS_SEPARATOR.join(part for part in (system_prompt, instructions) if part)
    if system:
        message_id = INSTRUCTIONS_ID if instructions else SYSTEM_PROMPT_ID
        messages.append(SystemMessage(content=system, id=message_id))
    messages.extend(to_langchain(entry) for entry in history)
    return messages


def split_system(text: str, instructions: str) -> tuple[str, str]:
    """The system prompt and the instructions of a system message that carries `instructions`
    after it (the prompt is "" when the message holds the instructions alone)."""
    suffix = INSTRUCTIONS_SEPARATOR + instructions
    if text.endswith(suffix):
        return text[: -len(suffix)], instructions
    return "", text


def initial_messages(
    request: TurnRequest, history: Sequence[ChainMessage], system_prompt: str | None
) -> list[BaseMessage]:
    """System prompt and instructions, the model-visible history, then the current user message."""
    messages = ahead_messages(history, system_prompt, request.instructions)
    user_markers = ChainMetadata(
        source_conversation_id=request.conversation_id,
        source_message_id=request.user.message_id,
        attachment_ids=[ref.id for ref in request.user.attachments] or None,
    )
    messages.append(
        HumanMessage(
            content=request.user.content,
            id=entry_id("user", request.conversation_id, request.user.message_id),
            additional_kwargs=_metadata_kwargs(user_markers),
        )
    )
    return messages
