"""Pre-model hook composition: rolled-forward input, state updates, never a stale input."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, SystemMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from chat_shell.agents.attempt_guidance import AttemptGuidance
from chat_shell.contracts import ChainMessage
from chat_shell.guard.composition import chain_pre_model_hooks
from tests.support.scripted_provider import ScriptedProvider, text, tool_call
from tests.support.turns import collect, make_request


async def test_later_hooks_see_earlier_updates_and_input() -> None:
    seen: list[list[str]] = []

    async def guard(state: dict[str, Any]) -> dict[str, Any]:
        summary = HumanMessage("summary", id="summary")
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), summary, state["messages"][-1]]}

    def observer(state: dict[str, Any]) -> dict[str, Any]:
        seen.append([m.id for m in state["messages"]])
        return {"llm_input_messages": [SystemMessage("first", id="sys"), *state["messages"]]}

    hook = chain_pre_model_hooks(guard, observer, AttemptGuidance("retry hint"))
    state = {
        "messages": [HumanMessage("old", id="h1"), AIMessage("a", id="a1"), HumanMessage("new", id="h2")]
    }
    result = await hook(state)
    assert seen == [["summary", "h2"]]
    assert [m.id for m in result["llm_input_messages"]] == ["sys", "summary", "h2", "attempt-guidance"]
    assert result["messages"][0].id == REMOVE_ALL_MESSAGES
    # Guidance reaches the model input only, never the state update.
    assert all(m.id != "attempt-guidance" for m in result["messages"])


async def test_empty_hooks_still_return_the_model_input() -> None:
    hook = chain_pre_model_hooks(lambda state: {}, AttemptGuidance(None))
    messages = [HumanMessage("q", id="h")]
    assert (await hook({"messages": messages}))["llm_input_messages"] == messages


def _first_call_only_trims() -> Any:
    """A guard that shapes the model input on its first call and returns nothing afterwards."""
    calls = 0

    def factory(context: Any) -> Any:
        from tests.chat_shell.passthrough_guard import PassthroughGuard

        class FirstCallOnly(PassthroughGuard):
            async def __call__(self, state: dict[str, Any]) -> dict[str, Any]:
                nonlocal calls
                calls += 1
                return {"llm_input_messages": state["messages"][-1:]} if calls == 1 else {}

        return FirstCallOnly(context)

    return factory


async def test_model_input_is_never_stale_across_hook_calls(
    scripted_provider: ScriptedProvider, make_shell: Any
) -> None:
    shell = make_shell(guard_factory=_first_call_only_trims())
    history = [
        ChainMessage(role="user", content="earlier question", id="u-old"),
        ChainMessage(role="assistant", content="earlier answer", id="a-old"),
    ]
    scripted_provider.script(tool_call("generate_report", {"rows": 2}), text("done"))
    await collect(shell, make_request(2, "report please", history=history))
    first, second = scripted_provider.requests
    assert [m["role"] for m in first["messages"]] == ["user"]
    # LangGraph would reuse the first call's list if the hook left the channel out.
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user", "assistant", "tool"]
