"""Driving the guard the way LangGraph does: call the hook, apply its `messages` update with
LangGraph's own `add_messages` reducer, append what the model and tools produce."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.graph.message import add_messages

from chat_shell.contracts import ContextCompactionEvent, ContextMetrics, ContextMetricsEvent, TurnEvent
from chat_shell.guard.context_guard import UnifiedContextGuard


class Recorder:
    """The turn's event sink."""

    def __init__(self) -> None:
        self.events: list[TurnEvent] = []

    def __call__(self, event: TurnEvent) -> None:
        self.events.append(event)

    @property
    def metrics(self) -> list[ContextMetrics]:
        return [e.snapshot for e in self.events if isinstance(e, ContextMetricsEvent)]

    @property
    def compactions(self) -> list[ContextCompactionEvent]:
        return [e for e in self.events if isinstance(e, ContextCompactionEvent)]


async def step(
    guard: UnifiedContextGuard, messages: Sequence[BaseMessage]
) -> tuple[dict[str, Any], list[BaseMessage]]:
    """One hook call; returns its update and the state after LangGraph applied it."""
    update = await guard({"messages": list(messages), "remaining_steps": 25})
    state = add_messages(list(messages), update["messages"]) if "messages" in update else list(messages)
    return update, list(state)


def tool_round(
    index: int, output: str, *, name: str = "run_shell", provider_input: int | None = None
) -> list[BaseMessage]:
    """An assistant tool call (with the provider's usage when given) and its result."""
    usage = (
        {"input_tokens": provider_input, "output_tokens": 12, "total_tokens": provider_input + 12}
        if provider_input is not None
        else None
    )
    call = AIMessage(
        "",
        id=f"ai-{index}",
        tool_calls=[{"id": f"call-{index}", "name": name, "args": {"command": f"step {index}"}}],
        usage_metadata=usage,
    )
    return [call, ToolMessage(output, tool_call_id=f"call-{index}", name=name, id=f"tool-{index}")]


def openai_shaped(message_id: str, call_id: str, name: str, arguments: str) -> AIMessage:
    """An assistant tool call stored the raw OpenAI way (`additional_kwargs["tool_calls"]`)."""
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    return AIMessage("", id=message_id, additional_kwargs={"tool_calls": [call]})
