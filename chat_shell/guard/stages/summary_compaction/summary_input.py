"""The summarizer's input: the history to summarize as transcript text, packed into chunks (SPEC 5.3).

Each message becomes a label line, its text and its tool calls (so summarizer requests carry no
tool-call/tool-result pairs to break and need no tool schemas). Chunks are runs of whole
messages found by binary search over the cumulative cached counts; a message larger than a
chunk is cut by characters in proportion to its count and continues in the next chunks, so
nothing is left out. Long texts are passed by reference as their own text parts, never copied.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from collections.abc import Sequence
from typing import NamedTuple

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from chat_shell.languages import CjkLanguage, cjk_language, dominant_cjk_language
from chat_shell.messages.markers import is_summary
from chat_shell.messages.tool_images import media_line

# A message cut across chunks is cut by characters in proportion to its cached count; this
# margin absorbs the uneven density of real text.
SPLIT_MARGIN = 0.85


def message_text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for part in content:
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif isinstance(part, dict):
            parts.append(media_line(part))
    return "\n".join(parts)


def conversation_language(messages: Sequence[BaseMessage]) -> CjkLanguage | None:
    """The CJK language the user writes in (their own messages, not an earlier summary, not
    tool output), or None for another script: the language the summary must be written in."""
    return dominant_cjk_language(
        message_text(m) for m in messages if isinstance(m, HumanMessage) and not is_summary(m)
    )


def in_language(summary: str, language: CjkLanguage | None) -> bool:
    """Whether the summary is written in the conversation's language, as far as its script tells."""
    return cjk_language(summary) == language


TextPart = dict[str, str]
# Message text shorter than this is joined with its neighbours; longer text is its own part.
SHORT_TEXT_CHARS = 2_048


def text_part(text: str) -> TextPart:
    return {"type": "text", "text": text}


# The transcript line that opens each message.
_LABEL_TEXTS: dict[type, str] = {
    AIMessage: "\n\n[assistant]\n",
    HumanMessage: "\n\n[user]\n",
    SystemMessage: "\n\n[system]\n",
}


@functools.lru_cache(maxsize=256)
def _tool_label(name: str) -> str:
    return f"\n\n[tool result: {name}]\n"


def _label_text(message: BaseMessage) -> str:
    label = _LABEL_TEXTS.get(type(message))
    if label is not None:
        return label
    if isinstance(message, ToolMessage):
        return _tool_label(message.name or "tool")
    if isinstance(message, AIMessage):
        return _LABEL_TEXTS[AIMessage]
    return _LABEL_TEXTS[SystemMessage if isinstance(message, SystemMessage) else HumanMessage]


def _calls_text(message: AIMessage) -> str:
    return "".join(f"\n[assistant calls {c['name']}({c['args']!r})]" for c in message.tool_calls)


def transcript_parts(messages: Sequence[BaseMessage]) -> list[TextPart]:
    """The messages as transcript text parts: a label line, the text, any tool calls. A long
    text is referenced as its own part, not copied (the HTTP client writes it once); short
    texts and labels are joined between them, so a part is allocated per long message only."""
    parts: list[TextPart] = []
    short: list[str] = []
    add = short.append
    labels = _LABEL_TEXTS
    for message in messages:
        kind = type(message)
        add(labels.get(kind) or _label_text(message))
        text = message.content
        if type(text) is not str:
            text = message_text(message)
        if len(text) < SHORT_TEXT_CHARS:
            add(text)
        else:
            parts.append({"type": "text", "text": "".join(short)})
            parts.append({"type": "text", "text": text})
            short = []
            add = short.append
        if kind is AIMessage and message.tool_calls:  # type: ignore[attr-defined]
            add(_calls_text(message))  # type: ignore[arg-type]
    if short:
        parts.append({"type": "text", "text": "".join(short)})
    return parts


class Chunk(NamedTuple):
    # Transcript text parts in order.
    parts: list[TextPart]
    tokens: int

    @property
    def text(self) -> str:
        return "".join(part["text"] for part in self.parts)


def chunk_transcript(
    messages: Sequence[BaseMessage], tokens: Sequence[int], chunk_tokens: int
) -> list[Chunk]:
    """The messages as transcript parts in order, packed into chunks of at most about
    `chunk_tokens` by their cached counts: the runs of whole messages that fit are found by
    binary search over the cumulative counts. A message larger than a chunk is cut by
    characters, in proportion to its count, and continues in the next chunks; nothing is left
    out."""
    budget = max(1, chunk_tokens)
    prefix = list(itertools.accumulate(tokens, initial=0))
    chunks: list[Chunk] = []
    parts: list[TextPart] = []
    used = 0
    index, end = 0, len(messages)
    while index < end:
        if tokens[index] > budget:
            parts, used = _cut(messages[index], tokens[index], budget, parts, used, chunks)
            index += 1
            continue
        stop = bisect.bisect_right(prefix, prefix[index] + budget - used, index + 1, end + 1) - 1
        if stop == index:  # the next message does not fit the room left: a new chunk
            chunks.append(Chunk(parts, used))
            parts, used = [], 0
            continue
        parts.extend(transcript_parts(messages[index:stop]))
        used += prefix[stop] - prefix[index]
        index = stop
        if index < end and tokens[index] <= budget:
            chunks.append(Chunk(parts, used))
            parts, used = [], 0
    if parts:
        chunks.append(Chunk(parts, used))
    return chunks


def _cut(
    message: BaseMessage, count: int, budget: int, parts: list[TextPart], used: int, chunks: list[Chunk]
) -> tuple[list[TextPart], int]:
    """Add an oversized message in pieces that fill the open chunk (`parts`, `used`) and then
    whole chunks; returns the chunk its last piece leaves open."""
    body = message_text(message)
    density = len(body) / max(1, count)  # characters per token of this message
    label = _label_text(message)
    start, piece = 0, 1
    while start < len(body):
        room = budget - used
        if room < budget // 10:
            chunks.append(Chunk(parts, used))
            parts, used = [], 0
            continue
        stop = min(len(body), start + max(1, int(room * density * SPLIT_MARGIN)))
        note = label if piece == 1 else f"{label[:-1]} (continued, part {piece})\n"
        parts.extend((text_part(note), text_part(body[start:stop])))
        used += math.ceil((stop - start) / density)
        start, piece = stop, piece + 1
        if start < len(body):
            chunks.append(Chunk(parts, used))
            parts, used = [], 0
    if isinstance(message, AIMessage) and message.tool_calls:
        parts.append(text_part(_calls_text(message)))
    return parts, used
