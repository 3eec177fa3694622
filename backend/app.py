"""The FastAPI application: wiring of settings, database, routes and error handling."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta

from fastapi import FastAPI

from backend.api.errors import install_error_handlers
from backend.api.limits import BodySizeLimit
from backend.api.routes import attachments, auth, conversations, health, history, pages, turns
from backend.context import AppContext
from backend.db import check_schema, create_engine, session_factory
from backend.local_model.integration import (
    LocalModelRuntime,
    local_model_wanted,
    running_local_model,
    with_local_provider,
)
from backend.runtime_factory import open_runtime, require_service_token, runtime_config
from backend.services.attachment_reader import DatabaseAttachmentReader
from backend.services.auth import Passwords
from backend.services.broker import create_broker
from backend.services.capabilities import CapabilityIssuer
from backend.services.event_log import EventWriter
from backend.services.history import DatabaseHistory
from backend.services.originals import DatabaseHistoryBrowser
from backend.services.turn_runner import TurnDefaults, TurnRunner
from backend.settings import Settings, get_settings
from chat_shell.history.loader import PackageHistoryLoader


def _remote_access(settings: Settings) -> CapabilityIssuer | None:
    """Service mode: each turn carries this backend's URL and a capability for its conversation."""
    if settings.runtime_mode != "service":
        return None
    return CapabilityIssuer(
        require_service_token(settings), settings.backend_url, settings.turn_capability_seconds
    )


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    if settings.runtime_mode == "service":
        require_service_token(settings)  # fail before serving, with the fix in the message

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = create_engine(
            settings.resolved_database_url, sqlite_busy_timeout=settings.sqlite_busy_timeout_seconds
        )
        async with AsyncExitStack() as stack:
            stack.push_async_callback(engine.dispose)
            await check_schema(engine)
            sessions = session_factory(engine)
            effective = settings
            local_model = None
            if local_model_wanted(settings):
                local_model = await stack.enter_async_context(running_local_model(settings))
                effective = with_local_provider(settings, local_model)
            runtime = await stack.enter_async_context(
                open_runtime(
                    effective,
                    history_loader=PackageHistoryLoader(DatabaseHistory(sessions)),
                    attachments=DatabaseAttachmentReader(sessions, settings),
                    history_browser=DatabaseHistoryBrowser(sessions),
                )
            )
            if local_model is not None:
                runtime = LocalModelRuntime(runtime, local_model)
            app.state.local_model = local_model
            broker = create_broker(settings.redis_url)
            writer = EventWriter(sessions, broker.publish)
            writer.start()
            stack.push_async_callback(broker.stop)
            stack.push_async_callback(writer.stop)
            defaults = TurnDefaults(
                model=runtime_config(effective).model, system_prompt=settings.system_prompt
            )
            days = settings.event_log_retention_days
            runner = TurnRunner(
                sessions,
                runtime,
                writer,
                broker,
                defaults,
                shared=settings.redis_url is not None,
                event_retention=timedelta(days=days) if days else None,
                remote_access=_remote_access(settings),
            )
            await runner.start()
            stack.push_async_callback(runner.stop)
            app.state.ctx = AppContext(
                settings, engine, sessions, broker, runner, Passwords(settings.password_hash_profile)
            )
            yield

    app = FastAPI(title="Chat Shell", version="0.1.0", lifespan=lifespan)
    app.add_middleware(
        BodySizeLimit, max_bytes=settings.max_request_bytes, exempt_prefixes=("/api/attachments",)
    )
    install_error_handlers(app)
    for module in (auth, conversations, history, turns, attachments, health, pages):
        app.include_router(module.router)
    app.mount("/static", pages.static_files, name="static")
    return app
