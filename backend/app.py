"""The FastAPI application: wiring of settings, database, routes and error handling."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta

from fastapi import FastAPI
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from backend import collector
from backend.api.errors import install_error_handlers
from backend.api.limits import BodySizeLimit
from backend.api.routes import (
    admin,
    api_docs,
    attachments,
    auth,
    conversations,
    health,
    history,
    models,
    operators,
    pages,
    presets,
    prometheus,
    search,
    shares,
    tools,
    turns,
)
from backend.api.web_security import SecurityHeaders
from backend.context import AppContext
from backend.db import check_schema, create_engine, session_factory
from backend.local_model.integration import (
    LocalModelRuntime,
    local_entry,
    local_model_wanted,
    require_accepting,
    running_local_model,
)
from backend.local_model.supervisor import LocalModelServer
from backend.model_catalog import ModelList, configured_catalog
from backend.runtime_factory import (
    model_infos,
    open_runtime,
    runtime_config,
)
from backend.secret_policy import require_backend_secrets
from backend.services.compaction.ahead import AheadCompactions
from backend.services.dashboard import rollups
from backend.services.delivery.broker import create_broker
from backend.services.delivery.capabilities import CapabilityIssuer
from backend.services.delivery.event_log import EventWriter
from backend.services.delivery.streams import OpenStreams
from backend.services.delivery.turn_runner import TurnDefaults, TurnLimits, TurnRunner
from backend.services.records.attachment_reader import DatabaseAttachmentReader
from backend.services.records.auth import Passwords
from backend.services.records.extraction.sandbox import ExtractionSandbox
from backend.services.records.originals import DatabaseHistoryBrowser
from backend.services.records.titles import GeneratedTitles
from backend.services.throttle import AttemptThrottle
from backend.settings import Settings, get_settings
from backend.telemetry import setup_telemetry
from chat_shell.runtime import ChatShell


def _remote_access(settings: Settings, key: bytes) -> CapabilityIssuer | None:
    """Service mode: each turn carries this backend's URL and a capability for its turn."""
    if settings.runtime_mode != "service":
        return None
    return CapabilityIssuer(key, settings.backend_url, settings.turn_max_seconds)


def create_app(settings: Settings | None = None, *, local_model: LocalModelServer | None = None) -> FastAPI:
    """The app; `local_model` is a server the caller already started (`serve` starts it before
    importing the app, so the model loads while this process imports and migrates), which the
    caller also stops. Without one, the app starts its own when the settings want one."""
    settings = settings or get_settings()
    # Fail before serving, with the fix in the message: a secret the configuration needs is
    # missing, weak or a placeholder (`WeakSecret`).
    key = require_backend_secrets(settings)
    # A bad models file or a provider key missing from the environment stops here, named.
    configured = configured_catalog(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = create_engine(
            settings.resolved_database_url, sqlite_busy_timeout=settings.sqlite_busy_timeout_seconds
        )
        async with AsyncExitStack() as stack:
            stack.push_async_callback(engine.dispose)
            if app.state.telemetry is not None:
                stack.callback(app.state.telemetry.flush)
            await check_schema(engine)
            sessions = session_factory(engine)
            catalog = configured
            served = local_model
            if served is None and local_model_wanted(settings):
                served = await stack.enter_async_context(running_local_model(settings))
            if served is not None:
                catalog = catalog.with_model(local_entry(settings, served), default=not configured.models)
            config = runtime_config(settings, catalog)
            runtime = await stack.enter_async_context(
                open_runtime(
                    settings,
                    catalog=catalog,
                    attachments=DatabaseAttachmentReader(sessions, settings),
                    history_browser=DatabaseHistoryBrowser(sessions),
                )
            )
            # Compaction ahead of time needs chat_shell in this process (package mode).
            ahead = (
                AheadCompactions(sessions, runtime, settings.system_prompt)
                if settings.compaction_ahead and isinstance(runtime, ChatShell)
                else None
            )
            previewer = runtime if isinstance(runtime, ChatShell) else None
            if served is not None:
                runtime = LocalModelRuntime(runtime, served)
            titles = GeneratedTitles(sessions, runtime) if settings.generated_titles else None
            app.state.local_model = served
            broker = create_broker(settings.redis_url)
            writer = EventWriter(sessions, broker.publish, rollups.write_staged)
            writer.start()
            stack.push_async_callback(broker.stop)
            stack.push_async_callback(writer.stop)
            defaults = TurnDefaults(
                catalog=catalog,
                system_prompt=settings.system_prompt,
                admit=lambda model: require_accepting(served, model),
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
                remote_access=_remote_access(settings, key),
                limits=TurnLimits(settings.max_running_turns, settings.turn_max_seconds),
                ahead=ahead,
                previewer=previewer,
                titles=titles,
            )
            await runner.start()
            stack.push_async_callback(runner.stop)
            if collector.full_collections_deferred():  # `serve` left them to this app
                collections = asyncio.create_task(collector.run_full_collections(lambda: runner.active() > 0))
                stack.callback(collections.cancel)
            passwords = Passwords(settings.password_hash_profile)
            stack.callback(passwords.close)
            extraction = ExtractionSandbox.from_settings(settings)
            stack.push_async_callback(asyncio.to_thread, extraction.stop)
            throttle = AttemptThrottle(
                settings.redis_url, settings.throttle_address_rate, settings.throttle_username_rate
            )
            app.state.ctx = AppContext(
                settings,
                engine,
                sessions,
                broker,
                runner,
                passwords,
                extraction,
                key,
                throttle,
                OpenStreams(settings.max_open_streams),
                ModelList(default=catalog.default, models=model_infos(config, catalog)),
                config,
            )
            yield

    # /docs is served from here with its assets from a local package (no CDN); ReDoc is off.
    app = FastAPI(title="Chat Shell", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None)
    # Once per process; disabled telemetry leaves every instrument and span a no-op.
    app.state.telemetry = setup_telemetry(settings)
    # The last added runs first: proxy headers decide the scheme, then every response gets the
    # security headers, including the size limit's own 413.
    app.add_middleware(
        BodySizeLimit, max_bytes=settings.max_request_bytes, exempt_prefixes=("/api/attachments",)
    )
    app.add_middleware(SecurityHeaders, settings=settings)
    if settings.trusted_proxies.strip():
        # Outermost: the client address (throttling) and scheme are the trusted proxy's word.
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=settings.trusted_proxies)
    install_error_handlers(app)
    for module in (
        auth,
        conversations,
        history,
        models,
        presets,
        search,
        shares,
        turns,
        attachments,
        tools,
        health,
        pages,
        operators,
        admin,
        prometheus,
    ):
        app.include_router(module.router)
    if settings.api_docs:
        app.include_router(api_docs.router)
        app.mount(api_docs.ASSETS_PATH, api_docs.assets, name="api-docs-assets")
    app.mount("/static", pages.static_files, name="static")
    return app
