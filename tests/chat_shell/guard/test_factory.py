"""`build_guard`: the `GuardFactory` the runtime calls once per turn attempt."""

from __future__ import annotations

from langchain_core.messages import HumanMessage, SystemMessage

from chat_shell.accounting.budget import budget_for
from chat_shell.accounting.text_counter import TiktokenText
from chat_shell.accounting.token_counter import TokenCounter
from chat_shell.guard.factory import build_guard
from chat_shell.guard.protocol import GuardContext, GuardFactory, TurnGuard, fixed_tools
from chat_shell.providers.profiles import resolve_profile
from tests.chat_shell.guard.helpers import Recorder, step, tool_round
from tests.support.texts import log_text

SCHEMAS = [
    {
        "type": "function",
        "function": {
            "name": "generate_report",
            "description": "Generate a deterministic sales report.",
            "parameters": {"type": "object", "properties": {"rows": {"type": "integer"}}},
        },
    }
]


def context(recorder: Recorder, **overrides: object) -> GuardContext:
    profile = resolve_profile("gpt-4o")
    values: dict[str, object] = {
        "profile": profile,
        "budget": budget_for(profile),
        "counter": TokenCounter.for_profile(profile),
        "conversation_id": 1,
        "turn_id": 1,
        "tools": fixed_tools(SCHEMAS),
        "emit": recorder,
    }
    values.update(overrides)
    return GuardContext(**values)  # type: ignore[arg-type]


async def test_the_factory_builds_a_turn_guard_wired_to_the_context() -> None:
    factory: GuardFactory = build_guard
    recorder = Recorder()
    guard: TurnGuard = factory(context(recorder))
    messages = [SystemMessage("sys", id="sys"), HumanMessage("show the logs", id="user-1")]
    _, state = await step(guard, messages)  # type: ignore[arg-type]
    update, _ = await step(guard, [*state, *tool_round(1, log_text(200_000), name="generate_report")])  # type: ignore[arg-type]
    assert len(update["messages"]) == 1
    (metrics,) = recorder.metrics[:1]
    assert metrics.breakdown["tool_schemas"] == TokenCounter(TiktokenText()).count_tool_schemas(SCHEMAS)
    assert guard.compactions == []


async def test_the_factory_passes_the_forced_compaction_flag() -> None:
    recorder = Recorder()
    messages = [SystemMessage("sys", id="sys"), HumanMessage("go", id="user-1")]
    for i in range(1, 5):
        messages += tool_round(i, log_text(25_000, seed=i))
    guard = build_guard(context(recorder, force_compaction=True))
    update, _ = await step(guard, messages)
    assert update["messages"]  # shrunk to keep although far under the trigger
    assert recorder.metrics[-1].used_input <= recorder.metrics[-1].keep
