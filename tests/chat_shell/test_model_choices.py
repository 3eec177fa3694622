"""Several models, each served by its own OpenAI-compatible endpoint under its provider's name:
the turn's model picks the endpoint, the profile and the summarizer; an unknown one is refused."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from chat_shell.contracts import TurnCompleted, TurnFailed
from chat_shell.providers.openai import ProviderConfig
from chat_shell.runtime import ChatShell, ModelChoice, RuntimeConfig
from tests.support.conversation import Conversation
from tests.support.scripted_provider import ScriptedProvider, served_provider, text
from tests.support.turns import collect, make_request

DOWN = "http://127.0.0.1:9/v1"


@pytest.fixture
async def second_provider() -> AsyncIterator[ScriptedProvider]:
    async with served_provider() as provider:
        yield provider


def _endpoint(base_url: str) -> ProviderConfig:
    return ProviderConfig(base_url=base_url, api_key="k", timeout_seconds=10, max_retries=0)


def _shell(first: str, second: str, **options: object) -> ChatShell:
    models = {
        "big": ModelChoice("big", _endpoint(first), "gpt-4o", summarizer="cheap"),
        "cheap": ModelChoice("cheap", _endpoint(second), "gpt-4o-mini"),
        "down": ModelChoice("down", _endpoint(DOWN), "gpt-4o"),
    }
    return ChatShell(RuntimeConfig(provider=models["big"].provider, model="big", models=models, **options))  # type: ignore[arg-type]


async def test_each_model_is_asked_at_its_own_endpoint_under_its_providers_name(
    scripted_provider: ScriptedProvider, second_provider: ScriptedProvider
) -> None:
    shell = _shell(scripted_provider.base_url, second_provider.base_url)
    scripted_provider.script(text("from the big one"))
    second_provider.script(text("from the cheap one"))
    big = await collect(shell, make_request(1, "hi", model="big"))
    cheap = await collect(shell, make_request(2, "hi again", model="cheap"))
    assert isinstance(big[-1], TurnCompleted) and big[-1].result.value == "from the big one"
    assert isinstance(cheap[-1], TurnCompleted) and cheap[-1].result.value == "from the cheap one"
    assert [body["model"] for body in scripted_provider.requests] == ["gpt-4o"]
    assert [body["model"] for body in second_provider.requests] == ["gpt-4o-mini"]
    # The profile is the provider name's (gpt-4o-mini's window), named by the id.
    assert (shell.profile("cheap").name, shell.profile("cheap").context_window) == ("cheap", 128_000)


async def test_a_model_not_configured_fails_the_turn_without_calling_any_provider(
    scripted_provider: ScriptedProvider, second_provider: ScriptedProvider
) -> None:
    shell = _shell(scripted_provider.base_url, second_provider.base_url)
    events = await collect(shell, make_request(1, "hi", model="gpt-4o"))
    failed = events[-1]
    assert isinstance(failed, TurnFailed) and failed.code == "unknown_model"
    assert "'gpt-4o'" in failed.message and "big" in failed.message
    assert scripted_provider.requests == [] and second_provider.requests == []


async def test_a_model_whose_provider_is_down_fails_naming_it_and_the_others_still_answer(
    scripted_provider: ScriptedProvider, second_provider: ScriptedProvider
) -> None:
    shell = _shell(scripted_provider.base_url, second_provider.base_url)
    down = await collect(shell, make_request(1, "hi", model="down"))
    scripted_provider.script(text("still here"))
    up = await collect(shell, make_request(2, "hi", model="big"))
    failed = down[-1]
    assert isinstance(failed, TurnFailed) and failed.code == "provider_unavailable"
    assert failed.message.startswith("Model 'down':")
    assert isinstance(up[-1], TurnCompleted) and up[-1].result.value == "still here"


async def test_a_model_with_another_summarizer_has_its_summaries_written_there(
    scripted_provider: ScriptedProvider, second_provider: ScriptedProvider
) -> None:
    shell = _shell(
        scripted_provider.base_url,
        second_provider.base_url,
        profile_overrides={"big": {"trigger_tokens": 1_500, "keep_tokens": 600}},
    )
    conversation = Conversation(shell)
    for turn in range(1, 20):
        scripted_provider.script(text(f"Reply {turn}: " + "details of the plan " * 60))
        await conversation.send(f"Question {turn}: " + "what about the budget " * 60)
        if conversation.checkpoint_turn is not None:
            break
    assert conversation.checkpoint_turn is not None, "the conversation never crossed the trigger"
    assert scripted_provider.summary_requests == []
    assert second_provider.summary_requests, "the summarizer model was never asked"
    assert {body["model"] for body in second_provider.summary_requests} == {"gpt-4o-mini"}
    assert second_provider.chat_requests == []
    # Summaries are written greedily; the answers keep the provider's own sampling.
    assert {body.get("temperature") for body in second_provider.summary_requests} == {0.0}
    assert all("temperature" not in body for body in scripted_provider.chat_requests)
