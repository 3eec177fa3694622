"""Operators' dashboard aggregates (SPEC 7), computed in SQL on SQLite and PostgreSQL alike.

Two tables carry everything: `turns` (one row per assistant message, with the final context
snapshot's used/available tokens, time to first token, refusal and overflow figures) and
`compaction_events` (one row per compaction attempt). Each chart is one grouped query over
an indexed time range (covering indexes of migration 0004), bucketed in SQL; percentiles come
from per-bucket value bins counted in the same scan (`percentiles`). Nothing loads every
conversation or message into Python.

Windows whose buckets are whole hours (7 and 30 days) read the same figures from the hourly
rollups (`models.rollups`, kept by `services.rollups` as turns start and finish): a few
thousand rows instead of every turn of the window. Shorter windows scan their few raw rows.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar

from sqlalchemy import BigInteger, Float, Integer, Select, and_, case, cast, func, literal_column, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.sql import ColumnElement

from backend.models import CompactionEvent, CompactionHour, Message, Turn, TurnHour, TurnStatus
from backend.models.base import utcnow
from backend.models.rollups import NO_BIN, ConversationPressure
from backend.services import percentiles, rollups

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
HOUR = timedelta(hours=1)
T = TypeVar("T")
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
    def whole_hours(self) -> bool:
        """Whether buckets (and so the start) fall on whole hours: the rollups can answer."""
        return self.bucket % HOUR == timedelta(0)

    @property
    def start_hour(self) -> int:
        return rollups.hour_of(self.start)

    @property
    def bucket_hours(self) -> int:
        return int(self.bucket / HOUR)

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


@dataclass
class _Sums:
    """Running sums of one time bucket, filled from its (bucket, bin) rows."""

    counts: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    peak: float | None = None
    low: float | None = None
    bins: list[percentiles.Bin] = field(default_factory=list)

    def widen(self, peak: float | None, low: float | None) -> None:
        if peak is not None:
            self.peak = peak if self.peak is None else max(self.peak, peak)
        if low is not None:
            self.low = low if self.low is None else min(self.low, low)


def _mean(total: float, count: float) -> float | None:
    return total / count if count else None


def _series(window: Window, rows: dict[int, dict[str, Any]], empty: dict[str, Any]) -> list[dict[str, Any]]:
    """One point per bucket, every key present (empty buckets hold zeros and nulls)."""
    return [{"start": start, **empty, **rows.get(i, {})} for i, start in enumerate(window.starts())]


async def _turn_buckets(db: AsyncSession, window: Window) -> dict[int, _Sums]:
    """The window's turn figures grouped by time bucket and time-to-first-token bin."""
    sums: dict[int, _Sums] = defaultdict(_Sums)
    for (
        index,
        bin_index,
        count,
        used,
        measured,
        peak,
        refused,
        overflows,
        failed,
        fastest,
        slowest,
    ) in await db.execute(
        _turn_hours(window) if window.whole_hours else _turn_rows(window, db.bind.dialect.name)
    ):
        entry = sums[index]
        for key, value in (
            ("turns", count),
            ("utilization", used),
            ("measured", measured),
            ("refusals", refused),
            ("overflow_errors", overflows),
            ("failed", failed),
        ):
            entry.counts[key] += value or 0
        entry.widen(peak, None)
        if bin_index is not None:
            entry.bins.append(percentiles.Bin(bin_index, count, fastest, slowest))
    return sums


def _turn_rows(window: Window, dialect: str) -> Select[Any]:
    """One scan of the window's turns."""
    bucket = _bucket(Turn.started_at, window, dialect).label("bucket")
    ttft_bin = percentiles.bin_case(Turn.ttft_ms).label("bin")
    utilisation = _ratio(Turn.context_used_tokens, Turn.context_available_tokens)
    return (
        select(
            bucket,
            ttft_bin,
            func.count(),
            func.sum(utilisation),
            func.count(utilisation),
            func.max(utilisation),
            func.sum(case((Turn.refused, 1), else_=0)),
            func.sum(Turn.overflow_errors),
            func.sum(case((Turn.status == TurnStatus.FAILED, 1), else_=0)),
            func.min(Turn.ttft_ms),
            func.max(Turn.ttft_ms),
        )
        .where(Turn.started_at >= window.start)
        .group_by(bucket, ttft_bin)
    )


def _turn_hours(window: Window) -> Select[Any]:
    """The same figures from the hourly rollups: the window holds whole hours from its start
    on, and the rollups hold every turn started since (as the raw query has no upper bound)."""
    bucket = ((TurnHour.hour - window.start_hour) // window.bucket_hours).label("bucket")
    ttft_bin = func.nullif(TurnHour.ttft_bin, NO_BIN).label("bin")
    return (
        select(
            bucket,
            ttft_bin,
            func.sum(TurnHour.turns),
            func.sum(TurnHour.utilization_sum),
            func.sum(TurnHour.utilization_count),
            func.max(TurnHour.utilization_max),
            func.sum(TurnHour.refusals),
            func.sum(TurnHour.overflow_errors),
            func.sum(TurnHour.failed),
            func.min(TurnHour.ttft_min),
            func.max(TurnHour.ttft_max),
        )
        .where(TurnHour.hour >= window.start_hour)
        .group_by(bucket, ttft_bin)
        # A started-then-finished turn leaves a zero row in its running bin.
        .having(func.sum(TurnHour.turns) != 0)
    )


async def _compaction_buckets(db: AsyncSession, window: Window) -> dict[int, _Sums]:
    """The window's compaction figures grouped by time bucket and duration bin."""
    query = (
        _compaction_hours(window) if window.whole_hours else _compaction_rows(window, db.bind.dialect.name)
    )
    sums: dict[int, _Sums] = defaultdict(_Sums)
    for (
        index,
        bin_index,
        timed,
        done,
        fallback,
        saved,
        scored,
        score_count,
        worst,
        fastest,
        slowest,
    ) in await db.execute(query):
        entry = sums[index]
        for key, value in (
            ("completed", done),
            ("fallback", fallback),
            ("tokens_saved", saved),
            ("retention", scored),
            ("scored", score_count),
        ):
            entry.counts[key] += value or 0
        entry.widen(None, worst)
        if bin_index is not None:
            entry.bins.append(percentiles.Bin(bin_index, timed, fastest, slowest))
    return sums


def _compaction_rows(window: Window, dialect: str) -> Select[Any]:
    """One scan of the window's compaction rows."""
    bucket = _bucket(CompactionEvent.created_at, window, dialect).label("bucket")
    duration_bin = percentiles.bin_case(CompactionEvent.duration_ms).label("bin")
    retention = case((CompactionEvent.strategy == "summary_compact", CompactionEvent.retention_score))
    return (
        select(
            bucket,
            duration_bin,
            func.count(CompactionEvent.duration_ms),
            func.sum(case((CompactionEvent.status == "completed", 1), else_=0)),
            func.sum(case((CompactionEvent.status == "fallback", 1), else_=0)),
            func.sum(CompactionEvent.tokens_saved),
            func.sum(retention),
            func.count(retention),
            func.min(retention),
            func.min(CompactionEvent.duration_ms),
            func.max(CompactionEvent.duration_ms),
        )
        .where(CompactionEvent.created_at >= window.start)
        .group_by(bucket, duration_bin)
    )


def _compaction_hours(window: Window) -> Select[Any]:
    """The same figures from the hourly rollups (see `_turn_hours`)."""
    row = CompactionHour
    bucket = ((row.hour - window.start_hour) // window.bucket_hours).label("bucket")
    duration_bin = func.nullif(row.duration_bin, NO_BIN).label("bin")
    summarised = row.strategy == "summary_compact"
    return (
        select(
            bucket,
            duration_bin,
            func.sum(row.attempts),
            func.sum(case((row.status == "completed", row.attempts), else_=0)),
            func.sum(case((row.status == "fallback", row.attempts), else_=0)),
            cast(func.sum(row.tokens_saved), BigInteger),
            func.sum(case((summarised, row.retention_sum))),
            func.sum(case((summarised, row.retention_count), else_=0)),
            func.min(case((summarised, row.retention_min))),
            func.min(row.duration_min),
            func.max(row.duration_max),
        )
        .where(row.hour >= window.start_hour)
        .group_by(bucket, duration_bin)
    )


def _percentiles(bins: list[percentiles.Bin]) -> tuple[float | None, float | None]:
    ordered = percentiles.merge(bins)
    return percentiles.percentile(ordered, 50), percentiles.percentile(ordered, 95)


async def _strategies(db: AsyncSession, window: Window) -> tuple[list[Any], int]:
    """Compaction totals per strategy over the window, and the turns running right now."""
    if window.whole_hours:
        row = CompactionHour
        query = (
            select(
                row.strategy,
                func.sum(row.attempts),
                func.sum(case((row.status == "completed", row.attempts), else_=0)),
                cast(func.sum(row.tokens_saved), BigInteger),
                func.sum(row.retention_sum) / func.nullif(func.sum(row.retention_count), 0),
            )
            .where(row.hour >= window.start_hour)
            .group_by(row.strategy)
        )
    else:
        query = (
            select(
                CompactionEvent.strategy,
                func.count(),
                func.sum(case((CompactionEvent.status == "completed", 1), else_=0)),
                func.coalesce(func.sum(CompactionEvent.tokens_saved), 0),
                func.avg(CompactionEvent.retention_score),
            )
            .where(CompactionEvent.created_at >= window.start)
            .group_by(CompactionEvent.strategy)
        )
    by_strategy = await db.execute(query)
    # A literal status and a condition on the indexed column: both databases then answer from
    # the partial index of running turns instead of scanning every turn.
    running_status = literal_column(f"'{TurnStatus.RUNNING.value}'")
    running = await db.scalar(
        select(func.count()).select_from(Turn).where(Turn.status == running_status, Turn.conversation_id > 0)
    )
    return list(by_strategy), int(running or 0)


async def summary(
    sessions: async_sessionmaker[AsyncSession], window_name: str, now: datetime | None = None
) -> dict[str, Any]:
    """The dashboard over a window. Its independent queries run at once, each on its own
    connection: the database works on them in parallel (SQLite releases the GIL)."""
    window = Window.ending_now(window_name, now)

    async def on_own_session(query: Callable[[AsyncSession], Awaitable[T]]) -> T:
        async with sessions() as db:
            return await query(db)

    turn_sums, compaction_sums, (by_strategy, running), pressure = await asyncio.gather(
        on_own_session(lambda db: _turn_buckets(db, window)),
        on_own_session(lambda db: _compaction_buckets(db, window)),
        on_own_session(lambda db: _strategies(db, window)),
        on_own_session(lambda db: _pressure(db, window)),
    )
    turn_points: dict[int, dict[str, Any]] = {}
    for index, entry in turn_sums.items():
        c = entry.counts
        p50, p95 = _percentiles(entry.bins)
        turn_points[index] = {
            "turns": int(c["turns"]),
            "utilization_avg": _mean(c["utilization"], c["measured"]),
            "utilization_max": entry.peak,
            "refusals": int(c["refusals"]),
            "overflow_errors": int(c["overflow_errors"]),
            "failed": int(c["failed"]),
            "ttft_p50_ms": p50,
            "ttft_p95_ms": p95,
        }
    compaction_points: dict[int, dict[str, Any]] = {}
    for index, entry in compaction_sums.items():
        c = entry.counts
        p50, p95 = _percentiles(entry.bins)
        compaction_points[index] = {
            "completed": int(c["completed"]),
            "fallback": int(c["fallback"]),
            "tokens_saved": int(c["tokens_saved"]),
            "retention_avg": _mean(c["retention"], c["scored"]),
            "retention_min": entry.low,
            "duration_p50_ms": p50,
            "duration_p95_ms": p95,
        }
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
    measured = list(turn_points.values())
    ttft_p50, ttft_p95 = _percentiles([b for entry in turn_sums.values() for b in entry.bins])
    duration_p50, duration_p95 = _percentiles([b for entry in compaction_sums.values() for b in entry.bins])
    return {
        "window": {
            "name": window_name,
            "start": window.start.isoformat(),
            "end": window.end.isoformat(),
            "bucket_seconds": int(window.bucket.total_seconds()),
        },
        "totals": {
            "turns": sum(b["turns"] for b in measured),
            "running_turns": running,
            "refusals": sum(b["refusals"] for b in measured),
            "overflow_errors": sum(b["overflow_errors"] for b in measured),
            "failed_turns": sum(b["failed"] for b in measured),
            "utilization_max": max(
                (b["utilization_max"] for b in measured if b["utilization_max"] is not None), default=None
            ),
            "compactions": attempts,
            "compactions_completed": succeeded,
            "compaction_success_rate": succeeded / attempts if attempts else None,
            "tokens_saved": sum(s["tokens_saved"] for s in strategies),
            "compaction_duration_p50_ms": duration_p50,
            "compaction_duration_p95_ms": duration_p95,
            "ttft_p50_ms": ttft_p50,
            "ttft_p95_ms": ttft_p95,
            "retention_avg": next(
                (s["retention_avg"] for s in strategies if s["strategy"] == "summary_compact"), None
            ),
        },
        "compactions_by_strategy": strategies,
        "turns": _series(window, turn_points, EMPTY_TURN_BUCKET),
        "compactions": _series(window, compaction_points, EMPTY_COMPACTION_BUCKET),
        "pressure": pressure,
    }


async def _pressure(db: AsyncSession, window: Window) -> list[dict[str, Any]]:
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
