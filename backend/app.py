"""The FastAPI application: wiring of settings, database, routes and error handling."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from backend.api.errors import install_error_handlers
from backend.api.limits import BodySizeLimit
from backend.api.routes import attachments, auth, conversations, health
from backend.context import AppContext
from backend.db import check_schema, create_engine, session_factory
from backend.settings import Settings, get_settings


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = create_engine(settings.resolved_database_url)
        try:
            await check_schema(engine)
            app.state.ctx = AppContext(settings=settings, engine=engine, sessions=session_factory(engine))
            yield
        finally:
            await engine.dispose()

    app = FastAPI(title="Chat Shell", version="0.1.0", lifespan=lifespan)
    app.add_middleware(
        BodySizeLimit, max_bytes=settings.max_request_bytes, exempt_prefixes=("/api/attachments",)
    )
    install_error_handlers(app)
    for module in (auth, conversations, attachments, health):
        app.include_router(module.router)
    return app
