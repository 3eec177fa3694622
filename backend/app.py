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
from backend.runtime_factory import (
    model_infos,
    open_runtime,
    runtime_config,
)
from backend.secret_policy import require_backend_secrets
from backend.services.accounts.auth import Passwords
from backend.services.attachments.extraction.sandbox import ExtractionSandbox
from backend.services.dashboard import rollups
from backend.services.delivery.broker import create_broker
from backend.services.delivery.event_log import EventWriter
from backend.services.delivery.job_queue import TurnQueue, create_queue
from backend.services.delivery.liveness import Liveness
from backend.services.delivery.streams import OpenStreams
from backend.services.delivery.turn_runner import TurnDefaults, TurnLimits, TurnRunner
from backend.services.model_catalog import ModelList, configured_catalog
from backend.services.throttle import AttemptThrottle
from backend.settings import Settings, get_settings
from backend.telemetry import setup_telemetry
from backend.turn_hosting import build_host, compactions_for, queue_worker
from chat_shell.runtime import ChatShell


async def _runs_no_turns(turn_id: int) -> bool:
    return False


async def _decides_no_turns(turn_id: int, call_id: str, allow: bool) -> bool | None:
    return None


async def _stopped(task: asyncio.Task[None]) -> None:
    """The worker inside `serve` drains like a worker process: cancelling it stops it gracefully."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


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
            runtime = await stack.enter_async_context(open_runtime(settings, sessions, catalog))
            previewer = runtime if isinstance(runtime, ChatShell) else None
            compactions = compactions_for(settings, sessions, runtime)
            if served is not None:
                runtime = LocalModelRuntime(runtime, served)
            app.state.local_model = served
            broker = create_broker(settings.redis_url)
            writer = EventWriter(sessions, broker.publish, rollups.write_staged)
            writer.start()
            stack.push_async_callback(broker.stop)
            stack.push_async_callback(writer.stop)
            open_streams = OpenStreams(settings.max_open_streams, settings.stream_capacity)

            def admit(model: str) -> None:
                require_accepting(served, model)
                open_streams.require_room()

            defaults = TurnDefaults(catalog=catalog, system_prompt=settings.system_prompt, admit=admit)
            limits = TurnLimits(settings.max_running_turns, settings.turn_capacity)
            queue = None
            if settings.turns_on_queue:
                queue = create_queue(settings.resolved_database_url)
                await stack.enter_async_context(queue.open_async())
            # The embedded server runs its turns itself; on the queue only with a worker inside.
            host = None
            if queue is None or settings.worker_in_process:
                host = build_host(
                    settings, sessions, runtime, writer, broker, key, compactions=compactions, queue=queue
                )
                stack.push_async_callback(host.stop)
                await broker.start(host.cancel_local, host.decide_local)
            else:
                await broker.start(_runs_no_turns, _decides_no_turns)
            runner = TurnRunner(
                sessions,
                runtime,
                broker,
                defaults,
                host=host if queue is None else None,
                queue=(
                    TurnQueue(queue, sessions, broker, settings.worker_restart_after_seconds)
                    if queue is not None
                    else None
                ),
                limits=limits,
                previewer=previewer,
                stream_poll_seconds=settings.stream_log_poll_seconds,
            )
            if queue is None:
                assert host is not None
                days = settings.event_log_retention_days
                upkeep = Liveness(sessions, broker, host.running, timedelta(days=days) if days else None)
                await upkeep.start()
                stack.push_async_callback(upkeep.stop)
            elif host is not None:
                worker = queue_worker(settings, queue, sessions, broker, host, compactions)
                working = asyncio.create_task(worker.run(signals=False), name="queue-worker")
                stack.push_async_callback(_stopped, working)
            if collector.full_collections_deferred():  # `serve` left them to this app
                collections = asyncio.create_task(collector.run_full_collections(lambda: runner.active > 0))
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
                host,
                passwords,
                extraction,
                key,
                throttle,
                open_streams,
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
