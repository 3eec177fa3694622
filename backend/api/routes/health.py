"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from backend.api.deps import Ctx
from backend.db import SchemaNotReady, check_schema

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(ctx: Ctx) -> JSONResponse:
    try:
        async with ctx.engine.connect() as connection:
            await connection.execute(text("SELECT 1"))
        await check_schema(ctx.engine)
    except SchemaNotReady as exc:
        return JSONResponse({"status": "not_ready", "reason": str(exc)}, status_code=503)
    except Exception as exc:  # any database failure means "not ready", never a 500
        return JSONResponse({"status": "not_ready", "reason": type(exc).__name__}, status_code=503)
    return JSONResponse({"status": "ready"})
