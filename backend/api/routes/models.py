"""The models a user may choose for a conversation (never their keys or URLs)."""

from __future__ import annotations

from fastapi import APIRouter

from backend.api.deps import Ctx, CurrentUser
from backend.services.model_catalog import ModelList

router = APIRouter(prefix="/api/models", tags=["models"])


@router.get("", response_model=ModelList)
async def list_models(_: CurrentUser, ctx: Ctx) -> ModelList:
    return ctx.models
