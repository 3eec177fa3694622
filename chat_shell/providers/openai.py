"""The OpenAI-compatible chat model client (any endpoint speaking `/v1/chat/completions`)."""

from __future__ import annotations

from dataclasses import dataclass

from langchain_openai import ChatOpenAI

from chat_shell.observability.model_spans import MODEL_CALLS
from chat_shell.providers.profiles import ModelProfile
from chat_shell.telemetry import sdk_installed


@dataclass(frozen=True)
class ProviderConfig:
    base_url: str
    api_key: str = "not-needed"
    timeout_seconds: float = 120.0
    # Retries of the openai client itself (connection errors, 408/409/429/5xx); kept small so a
    # failing provider surfaces as a clear turn error instead of minutes of silent retrying.
    max_retries: int = 1


def create_chat_model(profile: ModelProfile, config: ProviderConfig) -> ChatOpenAI:
    """A `ChatOpenAI` for `profile` against `config`'s endpoint.

    `stream_usage=True` always: with a custom `base_url` langchain-openai leaves it off, so no
    `stream_options` are sent and streamed responses carry no usage at all. With telemetry on,
    the model reports its calls to `MODEL_CALLS` (spans and metrics per model call).
    """
    return ChatOpenAI(
        model=profile.name,
        base_url=config.base_url,
        api_key=config.api_key,
        timeout=config.timeout_seconds,
        max_retries=config.max_retries,
        max_tokens=profile.max_output_tokens,
        stream_usage=True,
        callbacks=[MODEL_CALLS] if sdk_installed() else None,
    )
