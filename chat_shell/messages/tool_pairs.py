"""Tool-call/tool-result pairing, as OpenAI-compatible providers require it.

A tool result must answer a call of the assistant message right before it (only other tool
results in between), and every call must be answered. Compaction, recovery and the finalizer
all work on message lists that may break this (a truncated call, a tool that never ran, a tail
cut in the wrong place), so they share this one repair.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage


def _is_empty(content: str | Sequence[object]) -> bool:
    if isinstance(content, str):
        return not content.strip()
    return not content


def sanitize_tool_pairs(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """Drop orphan tool results and unanswered tool calls; drop AI messages left empty.

    Messages that change are copies with the same id; the input is never mutated.
    """
    # Pass 1: keep a tool result only if it answers an open call of the preceding AI message.
    kept: list[BaseMessage] = []
    answered: set[str] = set()
    open_calls: set[str] = set()
    for message in messages:
        if isinstance(message, ToolMessage):
            if message.tool_call_id in open_calls:
                open_calls.discard(message.tool_call_id)
                answered.add(message.tool_call_id)
                kept.append(message)
            continue
        open_calls = (
            {call["id"] for call in message.tool_calls if call["id"]}
            if isinstance(message, AIMessage)
            else set()
        )
        kept.append(message)

    # Pass 2: strip calls nobody answered (and unparsable calls, which never run).
    result: list[BaseMessage] = []
    for message in kept:
        if isinstance(message, AIMessage) and (message.tool_calls or message.invalid_tool_calls):
            calls = [call for call in message.tool_calls if call["id"] in answered]
            if len(calls) != len(message.tool_calls) or message.invalid_tool_calls:
                if not calls and _is_empty(message.content):
                    continue
                kwargs = {k: v for k, v in message.additional_kwargs.items() if k != "tool_calls"}
                message = message.model_copy(
                    update={"tool_calls": calls, "invalid_tool_calls": [], "additional_kwargs": kwargs}
                )
        result.append(message)
    return result


def tool_pair_count(messages: Sequence[BaseMessage]) -> int:
    """How many tool results answer a call in `messages` (for the persistence log)."""
    calls = {call["id"] for m in messages if isinstance(m, AIMessage) for call in m.tool_calls}
    return sum(1 for m in messages if isinstance(m, ToolMessage) and m.tool_call_id in calls)
