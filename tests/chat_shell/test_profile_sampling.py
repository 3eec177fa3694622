"""The embedded models' sampling (issue 35): a turn sends its profile's temperature, top_p and
llama.cpp's top_k and repeat penalty, and a models file's per-model setting wins."""

from __future__ import annotations

from pathlib import Path

from backend.services.model_catalog import configured_catalog
from backend.settings import Settings
from chat_shell.contracts import TurnCompleted
from chat_shell.providers.profiles import LOCAL_MODEL_NAME, resolve_profile
from tests.chat_shell.conftest import MakeShell
from tests.support.scripted_provider import ScriptedProvider, text
from tests.support.turns import collect, make_request


async def test_a_turn_with_the_local_model_sends_its_profiles_sampling(
    make_shell: MakeShell, scripted_provider: ScriptedProvider
) -> None:
    shell = make_shell(model=LOCAL_MODEL_NAME)
    scripted_provider.script(text("391"))
    events = await collect(shell, make_request(1, "What is 17 x 23?", model=LOCAL_MODEL_NAME))
    assert isinstance(events[-1], TurnCompleted)
    profile = resolve_profile(LOCAL_MODEL_NAME)
    sent = scripted_provider.chat_requests[-1]
    assert sent["temperature"] == profile.temperature == 0.2
    assert sent["top_p"] == profile.top_p == 0.8
    assert sent["top_k"] == profile.top_k == 20
    assert sent["repeat_penalty"] == profile.repeat_penalty == 1.05
    assert "min_p" not in sent


async def test_a_models_file_setting_wins_over_the_profiles_sampling(
    make_shell: MakeShell, scripted_provider: ScriptedProvider
) -> None:
    shell = make_shell(
        model=LOCAL_MODEL_NAME,
        profile_overrides={LOCAL_MODEL_NAME: {"temperature": 0.9, "top_k": 40, "min_p": 0.05}},
    )
    scripted_provider.script(text("391"))
    events = await collect(shell, make_request(1, "What is 17 x 23?", model=LOCAL_MODEL_NAME))
    assert isinstance(events[-1], TurnCompleted)
    sent = scripted_provider.chat_requests[-1]
    assert (sent["temperature"], sent["top_k"], sent["min_p"]) == (0.9, 40, 0.05)
    assert sent["top_p"] == 0.8  # what the file leaves unset stays the profile's


async def test_a_hosted_model_is_sent_no_sampling_it_did_not_ask_for(
    make_shell: MakeShell, scripted_provider: ScriptedProvider
) -> None:
    shell = make_shell()
    scripted_provider.script(text("ok"))
    await collect(shell, make_request(1, "hi"))
    sent = scripted_provider.chat_requests[-1]
    assert not {"temperature", "top_p", "top_k", "min_p", "repeat_penalty"} & set(sent)


async def test_a_models_file_entrys_sampling_reaches_the_request(
    tmp_path: Path, make_shell: MakeShell, scripted_provider: ScriptedProvider
) -> None:
    """The operator's models file, as read: its entry's profile table sets the local model's sampling."""
    path = tmp_path / "models.toml"
    path.write_text(
        f'[[models]]\nid = "{LOCAL_MODEL_NAME}"\nbase_url = "{scripted_provider.base_url}"\n'
        "profile = { temperature = 0.7, repeat_penalty = 1.1 }\n"
    )
    settings = Settings(models=path, database_url="sqlite+aiosqlite:///:memory:")
    overrides = configured_catalog(settings, environ={}).profile_overrides(settings)
    shell = make_shell(model=LOCAL_MODEL_NAME, profile_overrides=overrides)
    scripted_provider.script(text("391"))
    await collect(shell, make_request(1, "What is 17 x 23?", model=LOCAL_MODEL_NAME))
    sent = scripted_provider.chat_requests[-1]
    assert (sent["temperature"], sent["repeat_penalty"], sent["top_k"]) == (0.7, 1.1, 20)
