"""The backend picks its turn runtime from settings (package or service mode)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from backend.app import create_app
from backend.runtime_factory import (
    RuntimeConfigurationError,
    build_runtime,
    create_service_app,
    runtime_config,
)
from backend.secret_policy import WeakSecret
from backend.settings import Settings
from chat_shell.runtime import ChatShell
from chat_shell.service_client import RemoteChatShell
from tests.support.capabilities import SERVICE_TOKEN
from tests.support.scripted_provider import ScriptedProvider, text
from tests.support.servers import serve
from tests.support.turns import collect, deltas, make_request


def _settings(tmp_path: Path, **values: Any) -> Settings:
    return Settings(_env_file=None, data_dir=tmp_path, telemetry_enabled=False, **values)  # type: ignore[call-arg]


def test_package_mode_builds_an_in_process_runtime_with_profile_overrides(tmp_path: Path) -> None:
    settings = _settings(
        tmp_path,
        openai_base_url="http://127.0.0.1:9/v1",
        model="gpt-4o",
        context_window=32_000,
        max_output_tokens=2_000,
        tool_call_limit=5,
    )
    runtime = build_runtime(settings)
    assert isinstance(runtime, ChatShell)
    profile = runtime.profile()
    assert (profile.name, profile.context_window, profile.max_output_tokens) == ("gpt-4o", 32_000, 2_000)
    assert profile.source == "configured" and runtime.config.tool_call_limit == 5


def test_service_mode_builds_a_client(tmp_path: Path) -> None:
    settings = _settings(
        tmp_path, runtime_mode="service", service_url="http://127.0.0.1:8100", service_token=SERVICE_TOKEN
    )
    assert isinstance(build_runtime(settings), RemoteChatShell)


def test_service_mode_without_a_token_fails_with_the_fix(tmp_path: Path) -> None:
    settings = _settings(tmp_path, runtime_mode="service", openai_base_url="http://127.0.0.1:9/v1")
    with pytest.raises(WeakSecret, match=r"CHAT_SHELL_SERVICE_TOKEN is not set.*token_urlsafe"):
        build_runtime(settings)
    with pytest.raises(WeakSecret, match=r"CHAT_SHELL_SERVICE_TOKEN is not set.*token_urlsafe"):
        create_service_app(settings)
    with pytest.raises(WeakSecret, match=r"CHAT_SHELL_SERVICE_TOKEN is not set.*token_urlsafe"):
        create_app(settings)


@pytest.mark.parametrize("local_model", ["off", "auto"])
def test_no_provider_is_a_clear_configuration_error(tmp_path: Path, local_model: str) -> None:
    with pytest.raises(RuntimeConfigurationError, match="OPENAI_BASE_URL"):
        runtime_config(_settings(tmp_path, local_model=local_model))


def test_an_api_key_alone_means_the_openai_endpoint(tmp_path: Path) -> None:
    config = runtime_config(_settings(tmp_path, openai_api_key="sk-test"))
    assert config.provider.base_url == "https://api.openai.com/v1" and config.provider.api_key == "sk-test"


async def test_the_service_app_runs_turns_from_settings(
    tmp_path: Path, scripted_provider: ScriptedProvider
) -> None:
    settings = _settings(tmp_path, openai_base_url=scripted_provider.base_url, service_token=SERVICE_TOKEN)
    scripted_provider.script(text("served"))
    async with serve(create_service_app(settings)) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            assert (await client.get("/healthz")).status_code == 200
        client_settings = _settings(
            tmp_path, runtime_mode="service", service_url=url, service_token=SERVICE_TOKEN
        )
        remote = build_runtime(client_settings)
        events = await collect(remote, make_request())
        await remote.aclose()  # type: ignore[attr-defined]
    assert deltas(events) == "served" and events[-1].type == "turn.completed"


def test_compaction_settings_reach_every_models_profile_and_a_model_entry_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHAT_SHELL_COMPACTION_TRIGGER_TOKENS", "49152")
    monkeypatch.setenv("CHAT_SHELL_COMPACTION_KEEP_TOKENS", "24000")
    monkeypatch.setenv("CHAT_SHELL_SUMMARY_MAX_TOKENS", "900")
    monkeypatch.setenv(
        "CHAT_SHELL_PROFILES", '{"gpt-4o-mini": {"keep_tokens": 20000, "compaction_enabled": false}}'
    )
    settings = _settings(tmp_path, openai_base_url="http://127.0.0.1:9/v1", model="gpt-4o")
    shell = build_runtime(settings)
    assert isinstance(shell, ChatShell)
    profile = shell.profile()
    assert (profile.trigger_tokens, profile.keep_tokens, profile.summary_max_tokens) == (49_152, 24_000, 900)
    assert profile.source == "configured" and profile.compaction_enabled
    mini = shell.profile("gpt-4o-mini")
    assert (mini.trigger_tokens, mini.keep_tokens, mini.compaction_enabled) == (49_152, 20_000, False)


def test_an_unknown_profile_field_is_a_clear_settings_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown field"):
        _settings(tmp_path, profiles={"gpt-4o": {"trigger": 1}})
