"""Liveness and readiness, and the local model's state (one source: its supervisor's status)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from backend.api.deps import Ctx, local_model_of
from backend.db import SchemaNotReady, check_schema

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(ctx: Ctx, request: Request) -> JSONResponse:
    server = local_model_of(request)
    local: dict[str, Any] = {"local_model": server.status.as_json()} if server else {}
    try:
        async with ctx.engine.connect() as connection:
            await connection.execute(text("SELECT 1"))
        await check_schema(ctx.engine)
    except SchemaNotReady as exc:
        return JSONResponse({"status": "not_ready", "reason": str(exc), **local}, status_code=503)
    except Exception as exc:  # any database failure means "not ready", never a 500
        return JSONResponse({"status": "not_ready", "reason": type(exc).__name__, **local}, status_code=503)
    if server is not None and server.status.state != "ready":
        reason = server.status.message
        return JSONResponse({"status": "not_ready", "reason": reason, **local}, status_code=503)
    return JSONResponse({"status": "ready", **local})
