"""A conversation's own instructions: sent after the operator's system prompt in one system
message, counted under "system", and refused by name when they leave no room."""

from __future__ import annotations

from chat_shell.contracts import ContextMetricsEvent, TurnFailed
from tests.chat_shell.conftest import MakeShell
from tests.support.scripted_provider import ScriptedProvider, text
from tests.support.turns import collect, make_request


def _system_tokens(events: list) -> int:
    snapshots = [e.snapshot for e in events if isinstance(e, ContextMetricsEvent)]
    return snapshots[-1].breakdown["system"]


async def test_instructions_follow_the_system_prompt_and_count_as_system(
    make_shell: MakeShell, scripted_provider: ScriptedProvider
) -> None:
    shell = make_shell(system_prompt="Operator rules.")
    scripted_provider.script(text("Bonjour."), text("Hello."))
    instructed = await collect(shell, make_request(1, "hi", instructions="Always answer in French. " * 20))
    plain = await collect(shell, make_request(2, "hi"))
    first, second = scripted_provider.chat_requests
    assert first["messages"][0] == {
        "role": "system",
        "content": "Operator rules.\n\n" + "Always answer in French. " * 20,
    }
    assert second["messages"][0] == {"role": "system", "content": "Operator rules."}
    assert _system_tokens(instructed) >= _system_tokens(plain) + 100


async def test_instructions_over_the_input_budget_are_refused_by_name_without_calling_the_model(
    make_shell: MakeShell, scripted_provider: ScriptedProvider
) -> None:
    shell = make_shell(context_window=8192, system_prompt="Operator rules.")
    events = await collect(shell, make_request(1, "hi", instructions="Remember every rule here. " * 2_000))
    failed = events[-1]
    assert isinstance(failed, TurnFailed) and failed.code == "context_refused"
    assert failed.message.startswith("This conversation's instructions are about")
    assert "Shorten the conversation's instructions." in failed.message
    assert scripted_provider.requests == []
