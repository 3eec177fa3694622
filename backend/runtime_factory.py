"""The turn runtime the backend drives, chosen by configuration (SPEC 6.4, 8).

Package mode (default): `ChatShell` in this process, reading history, attachments and the
user-visible record in-process. Service mode: `RemoteChatShell` talking to `settings.service_url`;
the service (`create_service_app`, what `chat-shell service` serves) reads them back from the
backend over HTTP with the capability each turn request carries. Service mode needs
`CHAT_SHELL_SERVICE_TOKEN` on both sides and `CHAT_SHELL_CAPABILITY_KEY` on the backend.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.api.routes.prometheus import add_service_metrics
from backend.secret_policy import require_metrics_token, require_service_token
from backend.services.attachments.reader import DatabaseAttachmentReader
from backend.services.model_catalog import ModelCatalog, ModelInfo, configured_catalog
from backend.services.records.originals import DatabaseHistoryBrowser
from backend.settings import RuntimeConfigurationError, Settings
from backend.telemetry import setup_telemetry
from chat_shell.accounting.budget import budget_for
from chat_shell.api.app import create_service_app as create_chat_shell_app
from chat_shell.contracts import AttachmentReader, HistoryBrowser, TurnRuntime
from chat_shell.guard.stages.summary_compaction.settings import CompactionSettings
from chat_shell.host.remote import RemoteHost
from chat_shell.runtime import ChatShell, RuntimeConfig
from chat_shell.service_client import RemoteChatShell


def _no_model(settings: Settings) -> RuntimeConfigurationError:
    local = (
        "the local model is switched off (CHAT_SHELL_LOCAL_MODEL=off)"
        if settings.local_model == "off"
        else "no embedded local model is available"
    )
    return RuntimeConfigurationError(
        f"No model provider is configured and {local}: set OPENAI_BASE_URL (and OPENAI_API_KEY "
        "if the endpoint needs one) to an OpenAI-compatible endpoint, or CHAT_SHELL_MODELS to a "
        "models file."
    )


def runtime_config(settings: Settings, catalog: ModelCatalog | None = None) -> RuntimeConfig:
    """The runtime's configuration: every model of `catalog` (default: the configured ones)."""
    catalog = catalog if catalog is not None else configured_catalog(settings)
    if not catalog.models:
        raise _no_model(settings)
    choices = catalog.choices(settings.provider_timeout_seconds)
    return RuntimeConfig(
        provider=choices[catalog.default].provider,
        model=catalog.default,
        models=choices,
        context_window=settings.context_window,
        max_output_tokens=settings.max_output_tokens,
        tool_call_limit=settings.tool_call_limit,
        compaction=CompactionSettings(
            summary_timeout_seconds=settings.summary_timeout_seconds,
            summary_temperature=settings.summary_temperature,
            heartbeat_seconds=settings.compaction_heartbeat_seconds,
        ),
        profile_overrides=catalog.profile_overrides(settings),
        mcp_servers=settings.mcp_server_configs,
    )


def model_infos(config: RuntimeConfig, catalog: ModelCatalog) -> list[ModelInfo]:
    """What `GET /api/models` lists: each model's label and the scale of its budget."""
    infos = []
    for entry in catalog.models.values():
        profile = config.profile(entry.id)
        budget = budget_for(profile)
        infos.append(
            ModelInfo(
                id=entry.id,
                label=entry.label,
                accepts_images=entry.accepts_images,
                context_window=profile.context_window,
                max_output_tokens=profile.max_output_tokens,
                available_input=budget.available_input,
                trigger=budget.trigger,
                warning_from=budget.warning_from,
            )
        )
    return infos


def build_runtime(
    settings: Settings,
    *,
    catalog: ModelCatalog | None = None,
    attachments: AttachmentReader | None = None,
    history_browser: HistoryBrowser | None = None,
) -> TurnRuntime:
    """The runtime for the backend: in-process, or a client of the chat_shell service."""
    if settings.runtime_mode == "service":
        return RemoteChatShell(settings.service_url, token=require_service_token(settings))
    return ChatShell(
        runtime_config(settings, catalog), attachments=attachments, history_browser=history_browser
    )


@asynccontextmanager
async def open_runtime(
    settings: Settings, sessions: async_sessionmaker[AsyncSession], catalog: ModelCatalog
) -> AsyncIterator[TurnRuntime]:
    """The backend's runtime for the lifetime of the app or worker, reading attachments and
    originals from the database; a service client is closed on exit."""
    runtime = build_runtime(
        settings,
        catalog=catalog,
        attachments=DatabaseAttachmentReader(sessions, settings),
        history_browser=DatabaseHistoryBrowser(sessions),
    )
    if isinstance(runtime, ChatShell):
        runtime.start()
    try:
        yield runtime
    finally:
        if isinstance(runtime, RemoteChatShell | ChatShell):
            await runtime.aclose()


def create_service_app(settings: Settings) -> FastAPI:
    """chat_shell alone (`chat-shell service`): the package runtime behind `POST /v1/response`,
    reading each turn's history, attachments and originals from the backend that sent it."""
    token = require_service_token(settings)
    metrics_token = require_metrics_token(settings)
    host = RemoteHost()
    shell = ChatShell(runtime_config(settings), host=host)

    async def shutdown() -> None:
        await shell.aclose()
        await host.aclose()

    app = create_chat_shell_app(shell, service_token=token, on_shutdown=shutdown)
    telemetry = setup_telemetry(settings, component="runtime")
    if telemetry is not None:
        add_service_metrics(app, telemetry, (metrics_token, token))
    return app
