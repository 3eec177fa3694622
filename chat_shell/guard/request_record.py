"""The model request as sent, entry by entry (issue 19): what "What the model sees" shows.

Built from the composed pre-model hook's output (the view after every guard stage, with the
attempt guidance) and the tool set bound to that call (built-in and MCP tools), counted with the
turn's counter, whose per-message cache makes this a lookup for every message the guard already
counted; the tool set counts its schemas once per encoding, across turns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from chat_shell.accounting.token_counter import REPLY_PRIMING, TokenCounter, tool_calls_of
from chat_shell.contracts import IMAGE_PART_TYPES, ModelRequest, RequestEntry, RequestSource
from chat_shell.guard.protocol import GUIDANCE_ID
from chat_shell.messages.convert import INSTRUCTIONS_ID, split_system
from chat_shell.messages.markers import MARKER_KEY
from chat_shell.messages.tool_images import part_placeholder
from chat_shell.tools.mcp import server_of
from chat_shell.tools.registry import ToolSet

_ROLES: dict[str, Literal["system", "user", "assistant", "tool"]] = {
    "system": "system",
    "human": "user",
    "ai": "assistant",
    "tool": "tool",
}


def _text(message: BaseMessage) -> str:
    """The entry's text, its pictures as placeholders (never the bytes), then its tool calls.
    The pictures of a request are parts the guard built from checked images: their line comes
    from the data URL's type and length, not from decoding them again at every model call."""
    media = [
        part_placeholder(part)
        for part in (message.content if isinstance(message.content, list) else ())
        if isinstance(part, dict) and part.get("type") in IMAGE_PART_TYPES
    ]
    calls = [f"→ {call.name}({call.arguments})" for call in tool_calls_of(message)]
    return "\n".join(part for part in (message.text, *media, *calls) if part)


def _source(message: BaseMessage, raw: Mapping[str, Any], current: bool) -> RequestSource:
    if raw.get("summary_compacted"):
        return "summary"
    if message.id == GUIDANCE_ID:
        return "guidance"
    if isinstance(message, SystemMessage):
        return "system"
    if isinstance(message, ToolMessage):
        return "tool_output"
    if current:
        return "current_input"
    if raw.get("checkpoint_retained"):
        return "kept_tail"
    if raw.get("attachment_preview"):
        return "attachment_preview"
    return "history"


def _latest_user(messages: Sequence[BaseMessage]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        summary = (message.additional_kwargs.get(MARKER_KEY) or {}).get("summary_compacted")
        if isinstance(message, HumanMessage) and not summary and message.id != GUIDANCE_ID:
            return index
    return None


def _system_entries(
    message: BaseMessage, tokens: int, counter: TokenCounter, instructions: str
) -> list[RequestEntry]:
    """The system message that carries the conversation's instructions, as its two parts: the
    operator's prompt (its text stored by hash only) and the instructions; their tokens add up
    to the message's (the message's framing and the separator go with the prompt)."""
    prompt, own = split_system(message.text, instructions)
    if not prompt:
        return [RequestEntry(role="system", source="instructions", tokens=tokens, text=own)]
    own_tokens = min(tokens, counter.count_text(own))
    return [
        RequestEntry(role="system", source="system", tokens=tokens - own_tokens, text=prompt),
        RequestEntry(role="system", source="instructions", tokens=own_tokens, text=own),
    ]


def describe_request(
    messages: Sequence[BaseMessage],
    tools: ToolSet,
    counter: TokenCounter,
    *,
    attempt: int,
    instructions: str | None = None,
    with_input: bool = True,
) -> ModelRequest:
    """The request of one model call: `messages` as sent, then each tool definition (built-in
    and MCP) of `tools`, the set bound to the call. `instructions` are the conversation's, which
    the system message carries after the operator's prompt. Without `with_input` (the next
    turn's request before its message) no entry is the current input."""
    current = _latest_user(messages) if with_input else None
    entries: list[RequestEntry] = []
    for index, message in enumerate(messages):
        tokens = counter.count_message(message).tokens
        if instructions and message.id == INSTRUCTIONS_ID:
            entries.extend(_system_entries(message, tokens, counter, instructions))
            continue
        raw = message.additional_kwargs.get(MARKER_KEY) or {}
        text = _text(message)
        preview_chars = raw.get("attachment_preview_chars") if raw.get("attachment_preview") else None
        entries.append(
            RequestEntry(
                role=_ROLES.get(message.type, "user"),
                source=_source(message, raw, index == current),
                tokens=tokens,
                name=message.name if isinstance(message, ToolMessage | AIMessage) else None,
                text=text,
                preview_tokens=counter.count_text(text[:preview_chars]) if preview_chars else None,
                message_id=None if message.id == GUIDANCE_ID else message.id,
            )
        )
    sizes = tools.schema_sizes(counter)
    for schema, size in zip(tools.schemas, sizes, strict=True):
        function = schema.get("function") or {}
        name = str(function.get("name") or "")
        tool = tools.by_name.get(name)
        entries.append(
            RequestEntry(
                role="tool_schema",
                source="tool_schemas",
                tokens=size,
                name=name,
                server=server_of(tool) if tool is not None else None,
                text=str(function.get("description") or ""),
            )
        )
    # The tool list is counted whole (as the guard counts it); its separators are framing.
    separators = tools.schema_tokens(counter) - sum(sizes)
    return ModelRequest(attempt=attempt, entries=entries, framing_tokens=REPLY_PRIMING + separators)
