"""The turn runtime the backend drives, chosen by configuration (SPEC 6.4, 8).

Package mode (default): `ChatShell` in this process, reading history, attachments and the
user-visible record in-process. Service mode: `RemoteChatShell` talking to `settings.service_url`;
the service (`create_service_app`, what `chat-shell service` serves) reads them back from the
backend over HTTP with the capability each turn request carries. Service mode needs
`CHAT_SHELL_SERVICE_TOKEN` on both sides.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from backend.api.routes.prometheus import add_service_metrics
from backend.settings import Settings
from backend.telemetry import setup_telemetry
from chat_shell.api.app import create_service_app as create_chat_shell_app
from chat_shell.contracts import AttachmentReader, HistoryBrowser, HistoryLoader, TurnRuntime
from chat_shell.guard.protocol import GuardFactory
from chat_shell.host.remote import RemoteHost
from chat_shell.providers.openai import ProviderConfig
from chat_shell.remote import RemoteChatShell
from chat_shell.runtime import ChatShell, RuntimeConfig
from chat_shell.tools.registry import ToolRegistry

OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4o-mini"


class RuntimeConfigurationError(RuntimeError):
    """The settings do not describe a usable model provider."""


def provider_config(settings: Settings) -> ProviderConfig:
    if not settings.uses_remote_provider:
        local = (
            "the local model is switched off (CHAT_SHELL_LOCAL_MODEL=off)"
            if settings.local_model == "off"
            else "no embedded local model is available"
        )
        raise RuntimeConfigurationError(
            f"No model provider is configured and {local}: set OPENAI_BASE_URL (and OPENAI_API_KEY "
            "if the endpoint needs one) to an OpenAI-compatible endpoint."
        )
    return ProviderConfig(
        base_url=settings.openai_base_url or OPENAI_DEFAULT_BASE_URL,
        api_key=settings.openai_api_key or "not-needed",
        timeout_seconds=settings.provider_timeout_seconds,
    )


def require_service_token(settings: Settings) -> str:
    if not settings.service_token:
        raise RuntimeConfigurationError(
            "Service mode needs a shared secret: set CHAT_SHELL_SERVICE_TOKEN to the same value for the "
            "backend and the chat_shell service (it authenticates the backend to the service and keys "
            "the per-turn capabilities the service reads history with)."
        )
    return settings.service_token


def runtime_config(settings: Settings) -> RuntimeConfig:
    return RuntimeConfig(
        provider=provider_config(settings),
        model=settings.model or DEFAULT_MODEL,
        context_window=settings.context_window,
        max_output_tokens=settings.max_output_tokens,
        tool_call_limit=settings.tool_call_limit,
        summary_timeout_seconds=settings.summary_timeout_seconds,
        compaction_heartbeat_seconds=settings.compaction_heartbeat_seconds,
        profile_overrides=settings.profile_overrides,
    )


def build_chat_shell(
    settings: Settings,
    *,
    tools: ToolRegistry | None = None,
    guard_factory: GuardFactory | None = None,
    history_loader: HistoryLoader | None = None,
    attachments: AttachmentReader | None = None,
    history_browser: HistoryBrowser | None = None,
) -> ChatShell:
    return ChatShell(
        runtime_config(settings),
        tools=tools,
        guard_factory=guard_factory,
        history_loader=history_loader,
        attachments=attachments,
        history_browser=history_browser,
    )


def build_runtime(
    settings: Settings,
    *,
    guard_factory: GuardFactory | None = None,
    history_loader: HistoryLoader | None = None,
    attachments: AttachmentReader | None = None,
    history_browser: HistoryBrowser | None = None,
) -> TurnRuntime:
    """The runtime for the backend: in-process, or a client of the chat_shell service."""
    if settings.runtime_mode == "service":
        return RemoteChatShell(settings.service_url, token=require_service_token(settings))
    return build_chat_shell(
        settings,
        guard_factory=guard_factory,
        history_loader=history_loader,
        attachments=attachments,
        history_browser=history_browser,
    )


@asynccontextmanager
async def open_runtime(
    settings: Settings,
    *,
    history_loader: HistoryLoader | None = None,
    attachments: AttachmentReader | None = None,
    history_browser: HistoryBrowser | None = None,
) -> AsyncIterator[TurnRuntime]:
    """The backend's runtime for the lifetime of the app; a service client is closed on exit."""
    runtime = build_runtime(
        settings, history_loader=history_loader, attachments=attachments, history_browser=history_browser
    )
    try:
        yield runtime
    finally:
        if isinstance(runtime, RemoteChatShell):
            await runtime.aclose()


def create_service_app(
    settings: Settings,
    *,
    guard_factory: GuardFactory | None = None,
    tools: ToolRegistry | None = None,
) -> FastAPI:
    """chat_shell alone (`chat-shell service`): the package runtime behind `POST /v1/response`,
    reading each turn's history, attachments and originals from the backend that sent it."""
    token = require_service_token(settings)
    host = RemoteHost()
    shell = ChatShell(runtime_config(settings), tools=tools, guard_factory=guard_factory, host=host)
    app = create_chat_shell_app(shell, service_token=token, on_shutdown=host.aclose)
    telemetry = setup_telemetry(settings, component="runtime")
    if telemetry is not None:
        add_service_metrics(app, telemetry, (settings.metrics_token, token))
    return app
