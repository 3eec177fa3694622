"""The one finalizer every turn ending goes through (SPEC 5.5).

From the authoritative final state it derives, together, the three things a turn leaves
behind: the `messages_chain`, the live state (for the final context metrics) and the
termination reason. Normal, recovered, retried, failed and cancelled turns all pass here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from chat_shell.agents.builder import STEP_LIMIT_REPLY
from chat_shell.agents.serializer import serialize_chain, validate_chain
from chat_shell.agents.turn_context import TurnContext
from chat_shell.contracts import ChainMessage, TerminationReason
from chat_shell.guard.protocol import TurnGuard
from chat_shell.messages.tool_pairs import sanitize_tool_pairs


@dataclass(frozen=True)
class FinalTurn:
    messages_chain: list[ChainMessage]
    live_messages: list[BaseMessage]
    termination_reason: TerminationReason


def is_step_limit_reply(message: BaseMessage) -> bool:
    return isinstance(message, AIMessage) and not message.tool_calls and message.content == STEP_LIMIT_REPLY


def without_step_limit_reply(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """LangGraph's "need more steps" stand-in is not the model's words: it is never kept."""
    return [m for m in messages if not is_step_limit_reply(m)]


def has_unexecuted_tool_calls(messages: Sequence[BaseMessage]) -> bool:
    """Whether the last assistant message asked for tools that never ran."""
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return bool(message.invalid_tool_calls) or any(
                call["id"] not in answered for call in message.tool_calls
            )
    return False


def finalize_turn(
    state: Sequence[BaseMessage],
    turn: TurnContext,
    guards: Sequence[TurnGuard],
    reason: TerminationReason,
) -> FinalTurn:
    live = sanitize_tool_pairs(without_step_limit_reply(state))
    # Each attempt's guard records calibration samples on the replies it saw requested.
    for guard in guards:
        live = guard.annotate_responses(live)
    chain = serialize_chain(turn.produced(live))
    validate_chain(chain)
    return FinalTurn(messages_chain=chain, live_messages=live, termination_reason=reason)
