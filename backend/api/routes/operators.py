"""Operators' dashboard data (SPEC 6.1 `GET /api/metrics/summary`, SPEC 7): operator accounts only.

Aggregates come from `backend.services.dashboard` (SQL over `turns` and `compaction_events`).
Other accounts get 403 `operator_only`; the figures never include message text or titles.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi import Path as PathParam

from backend.api.deps import Ctx, CurrentOperator, Db
from backend.api.errors import not_found
from backend.services import dashboard
from backend.services.dashboard import WindowName

router = APIRouter(prefix="/api/metrics", tags=["operators"])


@router.get("/summary")
async def metrics_summary(
    _: CurrentOperator, ctx: Ctx, window: Annotated[WindowName, Query()] = "24h"
) -> dict[str, Any]:
    """Charts over the window (bucketed series), totals, and the conversations under most pressure."""
    return await dashboard.summary(ctx.sessions, window)


@router.get("/conversations/{conversation_id}")
async def conversation_metrics(
    _: CurrentOperator, db: Db, conversation_id: Annotated[int, PathParam(ge=1, le=2**63 - 1)]
) -> dict[str, Any]:
    """One conversation's latest context snapshot, recent turns' pressure and compaction history."""
    detail = await dashboard.conversation_detail(db, conversation_id)
    if detail is None:
        raise not_found("conversation metrics")
    return detail
