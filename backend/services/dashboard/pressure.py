"""Context pressure per conversation (SPEC 7): the conversations closest to (or over) their
limit in a window, and one conversation's drill-down. Figures only: no message text, no title
(operators see context pressure, not what was said)."""

from __future__ import annotations

import logging

from pydantic import ValidationError
from sqlalchemy import and_, case, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from backend.models import CompactionEvent, Message, Turn
from backend.models.rollups import ConversationPressure
from backend.schemas.dashboard import CompactionOut, ConversationDetail, PressureRow, TurnPressure
from backend.services.dashboard.windows import Window, ratio
from backend.services.errors import NotFound
from chat_shell.contracts import ContextMetrics

log = logging.getLogger(__name__)

PRESSURE_ROWS = 20
DRILL_DOWN_TURNS = 200
DRILL_DOWN_COMPACTIONS = 100


async def pressure(db: AsyncSession, window: Window) -> list[PressureRow]:
    """The conversations whose latest snapshot in the window is closest to (or over) the limit."""
    measured = and_(Turn.started_at >= window.start, Turn.context_used_tokens.is_not(None))
    figures = (
        func.count().label("turns"),
        func.sum(case((Turn.refused, 1), else_=0)).label("refusals"),
        func.coalesce(func.sum(Turn.overflow_errors), 0).label("overflow_errors"),
    )
    if window.whole_hours:
        # Each conversation's latest measured turn is kept as it finishes: the top rows come
        # from that index, and only their conversations' turns are counted.
        top = (
            select(ConversationPressure.conversation_id, ConversationPressure.turn_id)
            .where(ConversationPressure.started_at >= window.start)
            .order_by(ConversationPressure.utilization.desc(), ConversationPressure.conversation_id)
            .limit(PRESSURE_ROWS)
            .subquery("top")
        )
        latest = (
            select(top.c.conversation_id, top.c.turn_id.label("last_id"), *figures)
            .join(Turn, Turn.conversation_id == top.c.conversation_id)
            .where(measured)
            .group_by(top.c.conversation_id, top.c.turn_id)
            .subquery("latest")
        )
    else:
        # Grouped by an expression, so SQLite reads the window's range of the covering index
        # instead of walking the whole conversation_id index to skip a sort.
        conversation = (Turn.conversation_id + 0).label("conversation_id")
        latest = (
            select(conversation, func.max(Turn.id).label("last_id"), *figures)
            .where(measured)
            .group_by(conversation)
            .subquery("latest")
        )
    utilisation = ratio(Turn.context_used_tokens, Turn.context_available_tokens)
    rows = (
        await db.execute(
            select(
                latest.c.conversation_id,
                Turn.model_profile,
                Turn.context_used_tokens.label("used_input"),
                Turn.context_available_tokens.label("available_input"),
                Turn.context_window,
                utilisation.label("utilization"),
                Turn.started_at.label("last_turn_at"),
                Turn.termination_reason.label("last_termination_reason"),
                latest.c.turns,
                func.coalesce(latest.c.refusals, 0).label("refusals"),
                latest.c.overflow_errors,
            )
            .join(Turn, Turn.id == latest.c.last_id)
            .order_by(utilisation.desc(), latest.c.conversation_id)
            .limit(PRESSURE_ROWS)
        )
    ).all()
    counts: dict[int, tuple[int, int]] = {}
    if rows:
        for conversation_id, count, done in await db.execute(
            select(
                CompactionEvent.conversation_id,
                func.count(),
                func.sum(case((CompactionEvent.status == "completed", 1), else_=0)),
            )
            .where(
                CompactionEvent.conversation_id.in_([row.conversation_id for row in rows]),
                CompactionEvent.created_at >= window.start,
            )
            .group_by(CompactionEvent.conversation_id)
        ):
            counts[conversation_id] = (count, int(done or 0))
    return [
        PressureRow(
            **row._mapping,
            compactions=counts.get(row.conversation_id, (0, 0))[0],
            compactions_completed=counts.get(row.conversation_id, (0, 0))[1],
        )
        for row in rows
    ]


async def conversation_detail(db: AsyncSession, conversation_id: int) -> ConversationDetail:
    """One conversation's pressure history: its latest stored snapshot, recent turns, compactions."""
    turns = (
        await db.execute(
            select(
                Turn.id.label("turn_id"),
                Turn.assistant_message_pk,
                Turn.started_at,
                Turn.status,
                Turn.model_profile,
                Turn.termination_reason,
                Turn.context_used_tokens.label("used_input"),
                Turn.context_available_tokens.label("available_input"),
                ratio(Turn.context_used_tokens, Turn.context_available_tokens).label("utilization"),
                Turn.input_tokens,
                Turn.output_tokens,
                Turn.ttft_ms,
                Turn.refused,
                Turn.overflow_errors,
            )
            .where(Turn.conversation_id == conversation_id)
            .order_by(Turn.id.desc())
            .limit(DRILL_DOWN_TURNS)
        )
    ).all()
    if not turns:
        raise NotFound.of("conversation metrics")
    compactions = await db.scalars(
        select(CompactionEvent)
        .where(CompactionEvent.conversation_id == conversation_id)
        .order_by(CompactionEvent.id.desc())
        .limit(DRILL_DOWN_COMPACTIONS)
    )
    return ConversationDetail(
        conversation_id=conversation_id,
        model_profile=turns[0].model_profile,
        latest_snapshot=await _latest_snapshot(
            db, next((t.assistant_message_pk for t in turns if t.used_input is not None), None)
        ),
        turns=[TurnPressure.model_validate(turn) for turn in reversed(turns)],
        compactions=[CompactionOut.model_validate(row) for row in compactions],
    )


async def _latest_snapshot(db: AsyncSession, message_pk: int | None) -> ContextMetrics | None:
    """The final snapshot stored on the newest measured turn's assistant message."""
    if message_pk is None:
        return None
    result = await db.scalar(select(Message.result).where(Message.id == message_pk))
    snapshot = (result or {}).get("context_metrics")
    try:
        return ContextMetrics.model_validate(snapshot) if snapshot else None
    except ValidationError:
        log.warning("message %s holds an unreadable metrics snapshot", message_pk)
        return None
