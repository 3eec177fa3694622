"""Operators' dashboard data (SPEC 6.1 `GET /api/metrics/summary`, SPEC 7): operator accounts only.

Aggregates come from `backend.services.dashboard` (SQL over `turns` and `compaction_events`).
Other accounts get 403 `operator_only`; the figures never include message text or titles.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from backend.api.deps import Ctx, CurrentOperator, Db
from backend.api.params import ConversationId
from backend.schemas.dashboard import ConversationDetail, Summary
from backend.services.dashboard import aggregates, pressure
from backend.services.dashboard.windows import WindowName

router = APIRouter(prefix="/api/metrics", tags=["operators"])


@router.get("/summary", response_model=Summary)
async def metrics_summary(
    _: CurrentOperator, ctx: Ctx, window: Annotated[WindowName, Query()] = "24h"
) -> Summary:
    """Charts over the window (bucketed series), totals, and the conversations under most pressure."""
    return await aggregates.summary(ctx.sessions, window)


@router.get("/conversations/{conversation_id}", response_model=ConversationDetail)
async def conversation_metrics(
    _: CurrentOperator, db: Db, conversation_id: ConversationId
) -> ConversationDetail:
    """One conversation's latest context snapshot, recent turns' pressure and compaction history."""
    return await pressure.conversation_detail(db, conversation_id)
