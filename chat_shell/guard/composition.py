"""Composition of pre-model hooks into the one `pre_model_hook` LangGraph runs (SPEC 5.1).

Hooks run in order on a local copy of the state. A hook's `messages` update is applied with
LangGraph's own `add_messages` reducer so the next hook sees the new state, and its
`llm_input_messages` are rolled forward so later hooks build on them. The composed hook always
returns `llm_input_messages`: LangGraph keeps that channel in the checkpoint and reuses a stale
value on later calls when a hook leaves it out.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.graph.message import add_messages

PreModelHook = Callable[[dict[str, Any]], Awaitable[dict[str, Any]] | dict[str, Any]]


def model_input(state: dict[str, Any]) -> list[BaseMessage]:
    """What the model would see now: the rolled-forward input, else the state's messages."""
    return list(state.get("llm_input_messages") or state["messages"])


def chain_pre_model_hooks(*hooks: PreModelHook) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]:
    if not hooks:
        raise ValueError("chain_pre_model_hooks needs at least one hook")

    async def chained(state: dict[str, Any]) -> dict[str, Any]:
        local = {**state, "llm_input_messages": None}
        updates: list[BaseMessage] = []
        for hook in hooks:
            result = hook(local)
            if inspect.isawaitable(result):
                result = await result
            if not result:
                continue
            if result.get("messages"):
                updates.extend(result["messages"])
                local["messages"] = add_messages(local["messages"], result["messages"])
                # An input built on the old messages would hide this update from the model.
                local["llm_input_messages"] = None
            if result.get("llm_input_messages"):
                local["llm_input_messages"] = list(result["llm_input_messages"])
        output: dict[str, Any] = {"llm_input_messages": model_input(local)}
        if updates:
            output["messages"] = updates
        return output

    return chained
