"""Operators' dashboard aggregates (SPEC 7), computed in SQL on SQLite and PostgreSQL alike.

Two tables carry everything: `turns` (one row per assistant message, with the final context
snapshot's used/available tokens, time to first token, refusal and overflow figures) and
`compaction_events` (one row per compaction attempt). Each chart is one grouped query over
an indexed time range, bucketed in SQL; percentiles use window functions (`row_number`
over each bucket), which both databases have. Nothing loads every conversation into Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import Float, Integer, and_, case, cast, func, literal, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql import ColumnElement, Select

from backend.models import CompactionEvent, Message, Turn, TurnStatus
from backend.models.base import utcnow

WindowName = Literal["1h", "6h", "24h", "7d", "30d"]
# Window -> (length, bucket width): 60 to 120 points per chart.
WINDOWS: dict[str, tuple[timedelta, timedelta]] = {
    "1h": (timedelta(hours=1), timedelta(minutes=1)),
    "6h": (timedelta(hours=6), timedelta(minutes=5)),
    "24h": (timedelta(hours=24), timedelta(minutes=15)),
    "7d": (timedelta(days=7), timedelta(hours=2)),
    "30d": (timedelta(days=30), timedelta(hours=6)),
}
PRESSURE_ROWS = 20
DRILL_DOWN_TURNS = 200
DRILL_DOWN_COMPACTIONS = 100


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime
    bucket: timedelta

    @classmethod
    def ending_now(cls, name: str, now: datetime | None = None) -> Window:
        length, bucket = WINDOWS[name]
        now = now or utcnow()
        width = bucket.total_seconds()
        # Buckets aligned to whole multiples of their width, the last one holding `now`.
        last = datetime.fromtimestamp((now.timestamp() // width) * width, tz=now.tzinfo)
        count = int(length / bucket)
        return cls(last - bucket * (count - 1), now, bucket)

    @property
    def count(self) -> int:
        return int((self.end - self.start) / self.bucket) + 1

    def starts(self) -> list[str]:
        return [(self.start + self.bucket * i).isoformat() for i in range(self.count)]


def _epoch(column: Any, dialect: str) -> ColumnElement[float]:
    if dialect == "sqlite":
        # Stored as UTC text; julianday reads it (and uses no index, so filters stay on the column).
        return (func.julianday(column) - 2440587.5) * 86400.0
    return func.extract("epoch", column)


def _bucket(column: Any, window: Window, dialect: str) -> ColumnElement[int]:
    offset = (_epoch(column, dialect) - window.start.timestamp()) / window.bucket.total_seconds()
    return cast(func.floor(offset), Integer) if dialect != "sqlite" else cast(offset, Integer)


def _ratio(used: Any, available: Any) -> ColumnElement[float]:
    return cast(used, Float) / func.nullif(available, 0)


def _rank(percent: int, count: Any) -> ColumnElement[int]:
    """The 1-based row of the `percent` percentile among `count` sorted rows (nearest rank)."""
    return (count * percent + 99) // 100


async def _percentiles(
    db: AsyncSession, values: Select[Any], percents: Sequence[int] = (50, 95)
) -> dict[int | None, dict[int, float]]:
    """Nearest-rank percentiles per group of `values` (columns `grp`, `v`; non-null v)."""
    ranked = values.subquery("values")
    numbered = select(
        ranked.c.grp,
        ranked.c.v,
        func.row_number().over(partition_by=ranked.c.grp, order_by=ranked.c.v).label("rn"),
        func.count().over(partition_by=ranked.c.grp).label("n"),
    ).subquery("numbered")
    picks = [
        func.max(case((numbered.c.rn == _rank(p, numbered.c.n), numbered.c.v))).label(f"p{p}")
        for p in percents
    ]
    rows = await db.execute(select(numbered.c.grp, *picks).group_by(numbered.c.grp))
    return {row[0]: {p: row[i + 1] for i, p in enumerate(percents)} for row in rows}


EMPTY_TURN_BUCKET: dict[str, Any] = {
    "turns": 0,
    "utilization_avg": None,
    "utilization_max": None,
    "refusals": 0,
    "overflow_errors": 0,
    "failed": 0,
    "ttft_p50_ms": None,
    "ttft_p95_ms": None,
}
EMPTY_COMPACTION_BUCKET: dict[str, Any] = {
    "completed": 0,
    "fallback": 0,
    "tokens_saved": 0,
    "retention_avg": None,
    "retention_min": None,
    "duration_p50_ms": None,
    "duration_p95_ms": None,
}


def _series(window: Window, rows: dict[int, dict[str, Any]], empty: dict[str, Any]) -> list[dict[str, Any]]:
    """One point per bucket, every key present (empty buckets hold zeros and nulls)."""
    return [{"start": start, **empty, **rows.get(i, {})} for i, start in enumerate(window.starts())]


async def summary(db: AsyncSession, window_name: str, now: datetime | None = None) -> dict[str, Any]:
    dialect = db.bind.dialect.name
    window = Window.ending_now(window_name, now)
    turns_in = Turn.started_at >= window.start
    compactions_in = CompactionEvent.created_at >= window.start
    t_bucket = _bucket(Turn.started_at, window, dialect).label("bucket")
    c_bucket = _bucket(CompactionEvent.created_at, window, dialect).label("bucket")
    utilisation = _ratio(Turn.context_used_tokens, Turn.context_available_tokens)

    # Turns: volume, context utilisation of the final snapshot, refusals, overflow errors, failures.
    turn_rows = await db.execute(
        select(
            t_bucket,
            func.count(),
            func.avg(utilisation),
            func.max(utilisation),
            func.sum(case((Turn.refused, 1), else_=0)),
            func.coalesce(func.sum(Turn.overflow_errors), 0),
            func.sum(case((Turn.status == TurnStatus.FAILED, 1), else_=0)),
        )
        .where(turns_in)
        .group_by(t_bucket)
    )
    turn_buckets: dict[int, dict[str, Any]] = {}
    for bucket, count, avg, peak, refused, overflows, failed in turn_rows:
        turn_buckets[bucket] = {
            "turns": count,
            "utilization_avg": avg,
            "utilization_max": peak,
            "refusals": int(refused or 0),
            "overflow_errors": int(overflows or 0),
            "failed": int(failed or 0),
        }
    ttft_values = select(t_bucket.label("grp"), Turn.ttft_ms.label("v")).where(
        turns_in, Turn.ttft_ms.is_not(None)
    )
    ttft = await _percentiles(db, ttft_values)
    ttft_all = await _percentiles(
        db,
        select(literal(0).label("grp"), Turn.ttft_ms.label("v")).where(turns_in, Turn.ttft_ms.is_not(None)),
    )

    # Compactions: count by status, tokens saved, duration percentiles, summary retention.
    completed = CompactionEvent.status == "completed"
    retention = case((CompactionEvent.strategy == "summary_compact", CompactionEvent.retention_score))
    compaction_rows = await db.execute(
        select(
            c_bucket,
            func.sum(case((completed, 1), else_=0)),
            func.sum(case((CompactionEvent.status == "fallback", 1), else_=0)),
            func.coalesce(func.sum(CompactionEvent.tokens_saved), 0),
            func.avg(retention),
            func.min(retention),
        )
        .where(compactions_in)
        .group_by(c_bucket)
    )
    compaction_buckets: dict[int, dict[str, Any]] = {}
    for bucket, done, fallback, saved, retention_avg, retention_min in compaction_rows:
        compaction_buckets[bucket] = {
            "completed": int(done or 0),
            "fallback": int(fallback or 0),
            "tokens_saved": int(saved or 0),
            "retention_avg": retention_avg,
            "retention_min": retention_min,
        }
    duration_where = (compactions_in, CompactionEvent.duration_ms.is_not(None))
    durations = await _percentiles(
        db, select(c_bucket.label("grp"), CompactionEvent.duration_ms.label("v")).where(*duration_where)
    )
    durations_all = await _percentiles(
        db, select(literal(0).label("grp"), CompactionEvent.duration_ms.label("v")).where(*duration_where)
    )
    by_strategy = await db.execute(
        select(
            CompactionEvent.strategy,
            func.count(),
            func.sum(case((completed, 1), else_=0)),
            func.coalesce(func.sum(CompactionEvent.tokens_saved), 0),
            func.avg(CompactionEvent.retention_score),
        )
        .where(compactions_in)
        .group_by(CompactionEvent.strategy)
    )
    running = await db.scalar(select(func.count()).select_from(Turn).where(Turn.status == TurnStatus.RUNNING))

    for bucket, picks in ttft.items():
        turn_buckets.setdefault(bucket, {}).update(ttft_p50_ms=picks[50], ttft_p95_ms=picks[95])
    for bucket, picks in durations.items():
        compaction_buckets.setdefault(bucket, {}).update(duration_p50_ms=picks[50], duration_p95_ms=picks[95])
    turn_series = _series(window, turn_buckets, EMPTY_TURN_BUCKET)
    compaction_series = _series(window, compaction_buckets, EMPTY_COMPACTION_BUCKET)
    strategies = [
        {
            "strategy": strategy,
            "count": count,
            "completed": int(done or 0),
            "tokens_saved": int(saved or 0),
            "retention_avg": retention_avg,
        }
        for strategy, count, done, saved, retention_avg in by_strategy
    ]
    attempts = sum(s["count"] for s in strategies)
    succeeded = sum(s["completed"] for s in strategies)
    measured = [b for b in turn_series if b["turns"]]
    return {
        "window": {
            "name": window_name,
            "start": window.start.isoformat(),
            "end": window.end.isoformat(),
            "bucket_seconds": int(window.bucket.total_seconds()),
        },
        "totals": {
            "turns": sum(b["turns"] for b in measured),
            "running_turns": int(running or 0),
            "refusals": sum(b["refusals"] for b in measured),
            "overflow_errors": sum(b["overflow_errors"] for b in measured),
            "failed_turns": sum(b["failed"] for b in measured),
            "utilization_max": max((b["utilization_max"] or 0 for b in measured), default=None),
            "compactions": attempts,
            "compactions_completed": succeeded,
            "compaction_success_rate": succeeded / attempts if attempts else None,
            "tokens_saved": sum(s["tokens_saved"] for s in strategies),
            "compaction_duration_p50_ms": durations_all.get(0, {}).get(50),
            "compaction_duration_p95_ms": durations_all.get(0, {}).get(95),
            "ttft_p50_ms": ttft_all.get(0, {}).get(50),
            "ttft_p95_ms": ttft_all.get(0, {}).get(95),
            "retention_avg": next(
                (s["retention_avg"] for s in strategies if s["strategy"] == "summary_compact"), None
            ),
        },
        "compactions_by_strategy": strategies,
        "turns": turn_series,
        "compactions": compaction_series,
        "pressure": await _pressure(db, window),
    }


async def _pressure(db: AsyncSession, window: Window) -> list[dict[str, Any]]:
    """The conversations whose latest snapshot in the window is closest to (or over) the limit."""
    measured = and_(Turn.started_at >= window.start, Turn.context_used_tokens.is_not(None))
    latest = (
        select(
            Turn.conversation_id.label("conversation_id"),
            func.max(Turn.id).label("last_id"),
            func.count().label("turns"),
            func.sum(case((Turn.refused, 1), else_=0)).label("refusals"),
            func.coalesce(func.sum(Turn.overflow_errors), 0).label("overflow_errors"),
        )
        .where(measured)
        .group_by(Turn.conversation_id)
        .subquery("latest")
    )
    utilisation = _ratio(Turn.context_used_tokens, Turn.context_available_tokens)
    rows = (
        await db.execute(
            select(
                latest.c.conversation_id,
                Turn.model_profile,
                Turn.context_used_tokens,
                Turn.context_available_tokens,
                Turn.context_window,
                utilisation.label("utilization"),
                Turn.started_at,
                Turn.termination_reason,
                latest.c.turns,
                latest.c.refusals,
                latest.c.overflow_errors,
            )
            .join(Turn, Turn.id == latest.c.last_id)
            .order_by(utilisation.desc(), latest.c.conversation_id)
            .limit(PRESSURE_ROWS)
        )
    ).all()
    ids = [row.conversation_id for row in rows]
    counts: dict[int, tuple[int, int]] = {}
    if ids:
        for conversation_id, count, done in await db.execute(
            select(
                CompactionEvent.conversation_id,
                func.count(),
                func.sum(case((CompactionEvent.status == "completed", 1), else_=0)),
            )
            .where(CompactionEvent.conversation_id.in_(ids), CompactionEvent.created_at >= window.start)
            .group_by(CompactionEvent.conversation_id)
        ):
            counts[conversation_id] = (count, int(done or 0))
    return [
        {
            "conversation_id": row.conversation_id,
            "model_profile": row.model_profile,
            "used_input": row.context_used_tokens,
            "available_input": row.context_available_tokens,
            "context_window": row.context_window,
            "utilization": row.utilization,
            "last_turn_at": row.started_at.isoformat(),
            "last_termination_reason": row.termination_reason,
            "turns": row.turns,
            "refusals": int(row.refusals or 0),
            "overflow_errors": int(row.overflow_errors or 0),
            "compactions": counts.get(row.conversation_id, (0, 0))[0],
            "compactions_completed": counts.get(row.conversation_id, (0, 0))[1],
        }
        for row in rows
    ]


async def conversation_detail(db: AsyncSession, conversation_id: int) -> dict[str, Any] | None:
    """One conversation's pressure history: its latest stored snapshot, recent turns, compactions.

    Figures only: no message text, no title (operators see context pressure, not what was said).
    """
    turns = (
        await db.execute(
            select(
                Turn.id,
                Turn.assistant_message_pk,
                Turn.started_at,
                Turn.status,
                Turn.model_profile,
                Turn.termination_reason,
                Turn.context_used_tokens,
                Turn.context_available_tokens,
                Turn.context_window,
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
        return None
    compactions = (
        await db.execute(
            select(CompactionEvent)
            .where(CompactionEvent.conversation_id == conversation_id)
            .order_by(CompactionEvent.id.desc())
            .limit(DRILL_DOWN_COMPACTIONS)
        )
    ).scalars()
    snapshot = None
    for turn in turns:
        if turn.context_used_tokens is not None:
            # The final snapshot stored on that turn's assistant message (one JSON document).
            result = await db.scalar(select(Message.result).where(Message.id == turn.assistant_message_pk))
            snapshot = (result or {}).get("context_metrics")
            break
    return {
        "conversation_id": conversation_id,
        "model_profile": turns[0].model_profile,
        "latest_snapshot": snapshot,
        "turns": [
            {
                "turn_id": t.id,
                "started_at": t.started_at.isoformat(),
                "status": t.status,
                "termination_reason": t.termination_reason,
                "used_input": t.context_used_tokens,
                "available_input": t.context_available_tokens,
                "utilization": (
                    t.context_used_tokens / t.context_available_tokens
                    if t.context_used_tokens is not None and t.context_available_tokens
                    else None
                ),
                "input_tokens": t.input_tokens,
                "output_tokens": t.output_tokens,
                "ttft_ms": t.ttft_ms,
                "refused": t.refused,
                "overflow_errors": t.overflow_errors,
            }
            for t in reversed(turns)
        ],
        "compactions": [
            {
                "created_at": c.created_at.isoformat(),
                "turn_id": c.turn_id,
                "strategy": c.strategy,
                "status": c.status,
                "before_tokens": c.before_tokens,
                "after_tokens": c.after_tokens,
                "tokens_saved": c.tokens_saved,
                "duration_ms": c.duration_ms,
                "failure_reason": c.failure_reason,
                "retention_score": c.retention_score,
            }
            for c in compactions
        ],
    }
