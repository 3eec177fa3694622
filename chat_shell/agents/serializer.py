"""The `messages_chain` of an assistant message (SPEC 2): what the model sees of this turn later.

Assistant messages (with their tool calls) and tool results always; user and system messages
only when marked as a summary or a retained checkpoint clone (plain user messages live in their
own rows of the user-visible history). The chain is validated before it is stored.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from chat_shell.contracts import ChainMessage
from chat_shell.messages.convert import to_chain
from chat_shell.messages.markers import is_checkpoint_retained, is_summary


class ChainValidationError(ValueError):
    """A chain that a provider would reject; storing it would break every later turn."""


def serialize_chain(messages: Sequence[BaseMessage]) -> list[ChainMessage]:
    return [
        to_chain(m)
        for m in messages
        if isinstance(m, AIMessage | ToolMessage) or is_summary(m) or is_checkpoint_retained(m)
    ]


def validate_chain(chain: Sequence[ChainMessage]) -> None:
    """Every tool result answers an open call of the assistant entry before it, and every call
    is answered before the next non-tool entry."""
    open_calls: set[str] = set()
    for position, entry in enumerate(chain):
        if entry.role == "tool":
            if entry.tool_call_id not in open_calls:
                raise ChainValidationError(
                    f"chain entry {position} answers tool call {entry.tool_call_id!r}, which no preceding "
                    "assistant entry left open"
                )
            open_calls.discard(entry.tool_call_id)
            continue
        if open_calls:
            raise ChainValidationError(
                f"tool calls {sorted(open_calls)} are unanswered at chain entry {position}"
            )
        open_calls = {call.id for call in entry.tool_calls} if entry.role == "assistant" else set()
    if open_calls:
        raise ChainValidationError(f"tool calls {sorted(open_calls)} are unanswered at the end of the chain")
