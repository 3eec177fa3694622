"""The FastAPI application: wiring of settings, database, routes and error handling."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from fastapi import FastAPI

from backend.api.errors import install_error_handlers
from backend.api.limits import BodySizeLimit
from backend.api.routes import attachments, auth, conversations, health, turns
from backend.context import AppContext
from backend.db import check_schema, create_engine, session_factory
from backend.runtime_factory import open_runtime, runtime_config
from backend.services.attachment_reader import DatabaseAttachmentReader
from backend.services.broker import create_broker
from backend.services.event_log import EventWriter
from backend.services.turn_runner import TurnDefaults, TurnRunner
from backend.settings import Settings, get_settings


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = create_engine(settings.resolved_database_url)
        async with AsyncExitStack() as stack:
            stack.push_async_callback(engine.dispose)
            await check_schema(engine)
            sessions = session_factory(engine)
            reader = DatabaseAttachmentReader(sessions, settings)
            runtime = await stack.enter_async_context(open_runtime(settings, attachments=reader))
            broker = create_broker(settings.redis_url)
            writer = EventWriter(sessions, broker.publish)
            writer.start()
            stack.push_async_callback(broker.stop)
            stack.push_async_callback(writer.stop)
            defaults = TurnDefaults(
                model=runtime_config(settings).model, system_prompt=settings.system_prompt
            )
            runner = TurnRunner(
                sessions, runtime, writer, broker, defaults, shared=settings.redis_url is not None
            )
            await runner.start()
            stack.push_async_callback(runner.stop)
            app.state.ctx = AppContext(settings, engine, sessions, broker, runner)
            yield

    app = FastAPI(title="Chat Shell", version="0.1.0", lifespan=lifespan)
    app.add_middleware(
        BodySizeLimit, max_bytes=settings.max_request_bytes, exempt_prefixes=("/api/attachments",)
    )
    install_error_handlers(app)
    for module in (auth, conversations, turns, attachments, health):
        app.include_router(module.router)
    return app
