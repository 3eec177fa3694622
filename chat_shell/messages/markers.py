"""Markers on LangChain messages.

Every chat_shell marker lives in `additional_kwargs["chat_shell"]` as the fields of
`ChainMetadata`, the same whitelist that travels over HTTP. langchain-openai never sends
that key to a provider. Code recognizes summaries and retained clones by these markers only.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import BaseMessage

from chat_shell.contracts import ChainMetadata

MARKER_KEY = "chat_shell"


def markers(message: BaseMessage) -> ChainMetadata:
    raw = message.additional_kwargs.get(MARKER_KEY)
    return ChainMetadata.model_validate(raw) if raw else ChainMetadata()


def with_markers(message: BaseMessage, **fields: Any) -> BaseMessage:
    """A copy of `message` (same id) with the given marker fields set; `None` clears a field."""
    current = message.additional_kwargs.get(MARKER_KEY) or {}
    merged = {key: value for key, value in {**current, **fields}.items() if value is not None}
    ChainMetadata.model_validate(merged)  # only whitelisted fields may be set
    kwargs = {**message.additional_kwargs, MARKER_KEY: merged}
    return message.model_copy(update={"additional_kwargs": kwargs})


def is_summary(message: BaseMessage) -> bool:
    return bool((message.additional_kwargs.get(MARKER_KEY) or {}).get("summary_compacted"))


def is_checkpoint_retained(message: BaseMessage) -> bool:
    return bool((message.additional_kwargs.get(MARKER_KEY) or {}).get("checkpoint_retained"))


def is_compacted(message: BaseMessage) -> bool:
    return bool((message.additional_kwargs.get(MARKER_KEY) or {}).get("compacted"))
