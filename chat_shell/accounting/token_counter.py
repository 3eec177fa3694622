"""Token accounting for everything the provider receives (SPEC 4).

On top of a profile's text counter (`chat_shell.accounting.text_counter`), `TokenCounter`
counts whole messages the way an OpenAI-compatible request carries them (content, names, tool
calls in either shape, tool-call ids, per-message framing) and caches each message's count by a
hash of exactly those fields, so a message is tokenized once per process and, through its
persisted `token_count` marker, never again after a reload.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from chat_shell.accounting.text_counter import TextCounter, text_counter_for
from chat_shell.contracts import IMAGE_PART_TYPES, TokenCount
from chat_shell.messages import tool_images
from chat_shell.messages.markers import MARKER_KEY
from chat_shell.providers.profiles import ModelProfile

# Bump when the message formula below changes: persisted counts then stop matching.
FORMULA_VERSION = "m1"
# Framing of one chat message (start, role, separator, end), as in OpenAI's accounting.
TOKENS_PER_MESSAGE = 4
TOKENS_PER_NAME = 1
# The `{"type": "function", "function": {...}}` wrapper of one tool call.
TOKENS_PER_TOOL_CALL = 3
# Every request is primed with the start of the assistant's reply.
REPLY_PRIMING = 3
# One image part at high detail (a 512-px tile set); calibration corrects the provider's real cost.
IMAGE_PART_TOKENS = 765


def image_room(budget_tokens: int) -> int:
    """How many pictures a budget shows: at most half of it goes to pictures."""
    return budget_tokens // 2 // IMAGE_PART_TOKENS


# Large texts are counted once even when several callers ask (the cache key of a message is
# its hash, but a tool output's body is also counted on its own when it is compacted).
_MEMO_MIN_CHARS = 8_192
_MEMO_ENTRIES = 64


@dataclass(frozen=True)
class ToolCallText:
    """One tool call as the provider receives it, whatever shape it was stored in."""

    id: str
    name: str
    arguments: str


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _one_tool_call(call: Mapping[str, Any]) -> ToolCallText:
    function = call.get("function")
    if isinstance(function, Mapping):  # OpenAI shape: {id, type, function: {name, arguments}}
        name, arguments = function.get("name"), function.get("arguments")
    else:  # LangChain shape: {id, name, args} (`args` is a string on invalid tool calls)
        name, arguments = call.get("name"), call.get("args")
    if arguments is None:
        arguments = ""
    elif not isinstance(arguments, str):
        arguments = _json(arguments)
    return ToolCallText(id=str(call.get("id") or ""), name=str(name or ""), arguments=arguments)


def tool_calls_of(message: BaseMessage) -> list[ToolCallText]:
    """The tool calls langchain-openai sends for `message`: the LangChain lists when present,
    else the raw OpenAI-shaped `additional_kwargs["tool_calls"]`."""
    if not isinstance(message, AIMessage):
        return []
    calls: Sequence[Mapping[str, Any]] = [*message.tool_calls, *message.invalid_tool_calls]
    if not calls:
        raw = message.additional_kwargs.get("tool_calls")
        calls = [c for c in raw if isinstance(c, Mapping)] if isinstance(raw, list) else []
    return [_one_tool_call(call) for call in calls]


def _name_of(message: BaseMessage) -> str | None:
    if isinstance(message, ToolMessage):
        return None  # tool messages carry `tool_call_id`; their name is not sent
    name = message.name or message.additional_kwargs.get("name")
    return str(name) if name else None


def content_hash(message: BaseMessage) -> str:
    """A stable hash of every field that is counted (not of markers or other metadata)."""
    digest = hashlib.sha1(usedforsecurity=False)
    tool_call_id = message.tool_call_id if isinstance(message, ToolMessage) else ""
    header = f"{message.type}\x1f{_name_of(message) or ''}\x1f{tool_call_id}"
    digest.update(header.encode("utf-8", "surrogatepass"))
    calls = tool_calls_of(message)
    if calls:
        listed = [[c.id, c.name, c.arguments] for c in calls]
        digest.update(_json(listed).encode("utf-8", "surrogatepass"))
    digest.update(b"\x00")
    content = message.content
    if isinstance(content, str):
        digest.update(content.encode("utf-8", "surrogatepass"))
    else:
        listing = json.dumps(content, ensure_ascii=False, sort_keys=True, default=str)
        digest.update(listing.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


@dataclass(frozen=True)
class MessageCount:
    tokens: int
    content_hash: str
    # The message itself carries a valid `token_count` marker with this count.
    persisted: bool = False


class TokenCounter:
    """Counts requests in one profile's units with a per-message cache.

    The cache key is the content hash, which covers every counted field: a message keeps its
    count under any id (retained clones get fresh ids), and messages without ids are counted
    correctly. A message whose persisted `token_count` marker names this encoding and hash is
    not tokenized at all.
    """

    def __init__(self, text: TextCounter) -> None:
        self.text = text
        self.encoding = f"{text.name}/{FORMULA_VERSION}"
        self._by_hash: dict[str, int] = {}
        self._memo: OrderedDict[int, tuple[str, int]] = OrderedDict()

    @classmethod
    def for_profile(cls, profile: ModelProfile) -> TokenCounter:
        return cls(text_counter_for(profile))

    def count_text(self, text: str) -> int:
        if len(text) < _MEMO_MIN_CHARS:
            return self.text.count(text)
        hit = self._memo.get(id(text))
        if hit is not None and hit[0] is text:
            return hit[1]
        tokens = self.text.count(text)
        self._memo[id(text)] = (text, tokens)  # holding `text` keeps its id from being reused
        if len(self._memo) > _MEMO_ENTRIES:
            self._memo.popitem(last=False)
        return tokens

    def count_content(self, content: str | list[Any]) -> int:
        if isinstance(content, str):
            return self.count_text(content)
        tokens = 0
        for part in content:
            if isinstance(part, str):
                tokens += self.count_text(part)
            elif isinstance(part, Mapping) and part.get("type") in IMAGE_PART_TYPES:
                tokens += IMAGE_PART_TOKENS
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                tokens += self.count_text(part["text"])
            else:
                tokens += self.count_text(_json(part))
        return tokens

    def count_message(self, message: BaseMessage) -> MessageCount:
        digest = content_hash(message)
        persisted = self._persisted(message, digest)
        if persisted is not None:
            self._by_hash.setdefault(digest, persisted)
            return MessageCount(persisted, digest, persisted=True)
        tokens = self._by_hash.get(digest)
        if tokens is None:
            tokens = self._count_fields(message)
            self._by_hash[digest] = tokens
        return MessageCount(tokens, digest)

    def count_messages(self, messages: Sequence[BaseMessage]) -> int:
        """A whole request's messages, reply priming included (no tool schemas)."""
        return REPLY_PRIMING + sum(self.count_message(m).tokens for m in messages)

    def count_tool_schemas(self, schemas: Sequence[Mapping[str, Any]]) -> int:
        return self.count_text(_json(list(schemas))) if schemas else 0

    def marker(self, count: MessageCount) -> dict[str, Any]:
        """The `token_count` marker value that lets a reload skip tokenizing this message."""
        return TokenCount(
            encoding=self.encoding, content_hash=count.content_hash, tokens=count.tokens
        ).model_dump()

    def _persisted(self, message: BaseMessage, digest: str) -> int | None:
        raw = message.additional_kwargs.get(MARKER_KEY)
        stored = raw.get("token_count") if isinstance(raw, Mapping) else None
        if isinstance(stored, TokenCount):
            stored = stored.model_dump()
        if (
            isinstance(stored, Mapping)
            and stored.get("encoding") == self.encoding
            and stored.get("content_hash") == digest
            and isinstance(stored.get("tokens"), int)
        ):
            return int(stored["tokens"])
        return None

    def _count_fields(self, message: BaseMessage) -> int:
        tokens = TOKENS_PER_MESSAGE + self.count_content(message.content)
        name = _name_of(message)
        if name:
            tokens += TOKENS_PER_NAME + self.count_text(name)
        if isinstance(message, ToolMessage):
            tokens += self.count_text(message.tool_call_id)
            if tool_images.split(message.content) is not None:
                # Its pictures go out in a user message of their own, opened by a label.
                tokens += TOKENS_PER_MESSAGE + self.count_text(tool_images.images_label(message.tool_call_id))
        for call in tool_calls_of(message):
            tokens += TOKENS_PER_TOOL_CALL + self.count_text(call.id)
            tokens += self.count_text(call.name) + self.count_text(call.arguments)
        return tokens
