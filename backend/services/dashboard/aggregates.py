"""Operators' dashboard charts and totals (SPEC 7), computed in SQL on SQLite and PostgreSQL alike.

Two tables carry everything: `turns` (one row per assistant message, with the final context
snapshot's used/available tokens, time to first token, refusal and overflow figures) and
`compaction_events` (one row per compaction attempt). Each chart is one grouped query over
an indexed time range (covering indexes of migration 0004), bucketed in SQL; percentiles come
from per-bucket value bins counted in the same scan (`percentiles`). Nothing loads every
conversation or message into Python.

Windows whose buckets are whole hours (7 and 30 days) read the same figures from the hourly
rollups (`models.rollups`, kept by `rollups` as turns start and finish): a few thousand rows
instead of every turn of the window. Shorter windows scan their few raw rows.

MCP tool calls exist only as hourly rollups (`mcp_tool_hours`): their figures cover every
whole clock hour the window touches, from the hour holding its start to now.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import BigInteger, ColumnClause, Select, case, cast, func, literal_column, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.models import CompactionEvent, CompactionHour, McpToolHour, Turn, TurnHour, TurnStatus
from backend.models.rollups import NO_BIN
from backend.schemas.dashboard import (
    CompactionPoint,
    McpToolTotals,
    StrategyTotals,
    Summary,
    Totals,
    TurnPoint,
    WindowOut,
)
from backend.services.dashboard import percentiles
from backend.services.dashboard.pressure import pressure
from backend.services.dashboard.windows import Window, ratio
from chat_shell.contracts import SUMMARY_STRATEGIES

T = TypeVar("T")
# The figures each grouped query reports per (bucket, bin), after the bin's count: summed
# ones, then the one extreme kept per bucket.
TURN_SUMS = ("turns", "utilization", "measured", "refusals", "overflow_errors", "failed")
COMPACTION_SUMS = ("completed", "fallback", "tokens_saved", "retention", "scored")


@dataclass
class _Sums:
    """Running sums of one time bucket, filled from its (bucket, bin) rows."""

    counts: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    extreme: float | None = None
    bins: list[percentiles.Bin] = field(default_factory=list)

    @property
    def spread(self) -> tuple[float | None, float | None]:
        """The 50th and 95th percentiles of the binned values."""
        ordered = percentiles.merge(self.bins)
        return percentiles.percentile(ordered, 50), percentiles.percentile(ordered, 95)

    def percentiles(self, figure: str) -> dict[str, float | None]:
        p50, p95 = self.spread
        return {f"{figure}_p50_ms": p50, f"{figure}_p95_ms": p95}

    def whole(self, *keys: str) -> dict[str, int]:
        return {key: int(self.counts[key]) for key in keys}

    def mean(self, total: str, count: str) -> float | None:
        return self.counts[total] / self.counts[count] if self.counts[count] else None


async def _buckets(
    db: AsyncSession, query: Select[Any], sums: Sequence[str], keep: Callable[..., float]
) -> dict[int, _Sums]:
    """Rows `(bucket, bin, binned count, *sums, extreme, lowest, highest)` summed per bucket;
    `keep` (min or max) picks the bucket's extreme."""
    found: dict[int, _Sums] = defaultdict(_Sums)
    for index, bin_index, binned, *figures, extreme, lowest, highest in await db.execute(query):
        entry = found[index]
        for key, value in zip(sums, figures, strict=True):
            entry.counts[key] += value or 0
        if extreme is not None:
            entry.extreme = extreme if entry.extreme is None else keep(entry.extreme, extreme)
        if bin_index is not None:
            entry.bins.append(percentiles.Bin(bin_index, binned, lowest, highest))
    return found


def _raw(window: Window, dialect: str, at: Any, binned: Any, figures: Sequence[Any]) -> Select[Any]:
    """One scan of the window's raw rows (time column `at`), grouped by time bucket and by the
    bin of `binned`: the figures, then the bin's lowest and highest value."""
    bucket = window.bucket_of(at, dialect).label("bucket")
    value_bin = percentiles.bin_case(binned).label("bin")
    return (
        select(bucket, value_bin, *figures, func.min(binned), func.max(binned))
        .where(at >= window.start)
        .group_by(bucket, value_bin)
    )


def _rolled(
    window: Window, hour: Any, stored_bin: Any, figures: Sequence[Any], low: Any, high: Any
) -> Select[Any]:
    """The same figures from hourly rollups: the window holds whole hours from its start on,
    and the rollups hold every row since (as the raw scan has no upper bound)."""
    bucket = window.hour_bucket_of(hour).label("bucket")
    value_bin = func.nullif(stored_bin, NO_BIN).label("bin")
    return (
        select(bucket, value_bin, *figures, func.min(low), func.max(high))
        .where(hour >= window.start_hour)
        .group_by(bucket, value_bin)
    )


def _turns(window: Window, dialect: str) -> Select[Any]:
    """Per (bucket, time-to-first-token bin): turns (binned, then counted), `TURN_SUMS`, the
    highest utilisation."""
    if window.whole_hours:
        row = TurnHour
        figures = [func.sum(row.turns), func.sum(row.turns), func.sum(row.utilization_sum)]
        figures += [func.sum(row.utilization_count), func.sum(row.refusals), func.sum(row.overflow_errors)]
        figures += [func.sum(row.failed), func.max(row.utilization_max)]
        # A started-then-finished turn leaves a zero row in its running bin.
        return _rolled(window, row.hour, row.ttft_bin, figures, row.ttft_min, row.ttft_max).having(
            func.sum(row.turns) != 0
        )
    utilisation = ratio(Turn.context_used_tokens, Turn.context_available_tokens)
    figures = [func.count(), func.count(), func.sum(utilisation), func.count(utilisation)]
    figures += [func.sum(case((Turn.refused, 1), else_=0)), func.sum(Turn.overflow_errors)]
    figures += [func.sum(case((Turn.status == TurnStatus.FAILED, 1), else_=0)), func.max(utilisation)]
    return _raw(window, dialect, Turn.started_at, Turn.ttft_ms, figures)


def _compactions(window: Window, dialect: str) -> Select[Any]:
    """Per (bucket, duration bin): timed attempts, `COMPACTION_SUMS`, the lowest retention
    score (summaries only)."""
    if window.whole_hours:
        row = CompactionHour
        summarised = row.strategy.in_(SUMMARY_STRATEGIES)
        figures = [func.sum(row.attempts), *_by_status(row.status, row.attempts)]
        figures += [
            cast(func.sum(row.tokens_saved), BigInteger),
            func.sum(case((summarised, row.retention_sum))),
        ]
        figures += [func.sum(case((summarised, row.retention_count), else_=0))]
        figures += [func.min(case((summarised, row.retention_min)))]
        return _rolled(window, row.hour, row.duration_bin, figures, row.duration_min, row.duration_max)
    raw = CompactionEvent
    retention = case((raw.strategy.in_(SUMMARY_STRATEGIES), raw.retention_score))
    figures = [func.count(raw.duration_ms), *_by_status(raw.status, 1), func.sum(raw.tokens_saved)]
    figures += [func.sum(retention), func.count(retention), func.min(retention)]
    return _raw(window, dialect, raw.created_at, raw.duration_ms, figures)


def _summary_retention(strategies: list[StrategyTotals]) -> float | None:
    """The retention score of summaries made in turns and ahead of time, by completed count."""
    scored = [
        (s.retention_avg, s.completed)
        for s in strategies
        if s.strategy in SUMMARY_STRATEGIES and s.retention_avg is not None and s.completed
    ]
    total = sum(count for _, count in scored)
    return sum(score * count for score, count in scored) / total if total else None


def _by_status(status: Any, weight: Any) -> list[Any]:
    """Completed and fallback attempts, each row counting `weight`."""
    return [func.sum(case((status == value, weight), else_=0)) for value in ("completed", "fallback")]


async def _strategies(db: AsyncSession, window: Window) -> tuple[list[StrategyTotals], int]:
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
    strategies = [
        StrategyTotals(
            strategy=strategy,
            count=count,
            completed=int(done or 0),
            tokens_saved=int(saved or 0),
            retention_avg=retention_avg,
        )
        for strategy, count, done, saved, retention_avg in await db.execute(query)
    ]
    # A literal status and a condition on the indexed column: both databases then answer from
    # the partial index of running turns instead of scanning every turn.
    running_status: ColumnClause[str] = literal_column(f"'{TurnStatus.RUNNING.value}'")
    running = await db.scalar(
        select(func.count()).select_from(Turn).where(Turn.status == running_status, Turn.conversation_id > 0)
    )
    return strategies, int(running or 0)


async def _mcp_tools(db: AsyncSession, window: Window) -> list[McpToolTotals]:
    """Per MCP server and tool: calls, errors, timeouts and duration percentiles, busiest first."""
    row = McpToolHour
    query = (
        select(
            row.server,
            row.tool,
            func.nullif(row.duration_bin, NO_BIN),
            func.sum(row.calls),
            func.sum(row.errors),
            func.sum(row.timeouts),
            func.min(row.duration_min),
            func.max(row.duration_max),
        )
        .where(row.hour >= window.start_hour)
        .group_by(row.server, row.tool, row.duration_bin)
    )
    found: dict[tuple[str, str], _Sums] = defaultdict(_Sums)
    for server, tool, bin_index, calls, errors, timeouts, lowest, highest in await db.execute(query):
        entry = found[(server, tool)]
        for key, value in (("calls", calls), ("errors", errors), ("timeouts", timeouts)):
            entry.counts[key] += value
        if bin_index is not None:
            entry.bins.append(percentiles.Bin(bin_index, calls, lowest, highest))
    tools = [
        McpToolTotals(
            server=server,
            tool=tool,
            **entry.whole("calls", "errors", "timeouts"),
            duration_p50_ms=entry.spread[0],
            duration_p95_ms=entry.spread[1],
        )
        for (server, tool), entry in found.items()
    ]
    return sorted(tools, key=lambda t: (-t.calls, t.server, t.tool))


def _turn_point(start: datetime, entry: _Sums) -> TurnPoint:
    return TurnPoint(
        start=start,
        **entry.whole("turns", "refusals", "overflow_errors", "failed"),
        utilization_avg=entry.mean("utilization", "measured"),
        utilization_max=entry.extreme,
        **entry.percentiles("ttft"),
    )


def _compaction_point(start: datetime, entry: _Sums) -> CompactionPoint:
    return CompactionPoint(
        start=start,
        **entry.whole("completed", "fallback", "tokens_saved"),
        retention_avg=entry.mean("retention", "scored"),
        retention_min=entry.extreme,
        **entry.percentiles("duration"),
    )


def _all(sums: Iterable[_Sums]) -> _Sums:
    return _Sums(bins=[b for entry in sums for b in entry.bins])


async def summary(
    sessions: async_sessionmaker[AsyncSession], window_name: str, now: datetime | None = None
) -> Summary:
    """The dashboard over a window. Its independent queries run at once, each on its own
    connection: the database works on them in parallel (SQLite releases the GIL)."""
    window = Window.ending_now(window_name, now)

    async def on_own_session(query: Callable[[AsyncSession], Awaitable[T]]) -> T:
        async with sessions() as db:
            return await query(db)

    def dialect(db: AsyncSession) -> str:
        return db.get_bind().dialect.name

    turn_sums, compaction_sums, (strategies, running), pressed, mcp_tools = await asyncio.gather(
        on_own_session(lambda db: _buckets(db, _turns(window, dialect(db)), TURN_SUMS, max)),
        on_own_session(lambda db: _buckets(db, _compactions(window, dialect(db)), COMPACTION_SUMS, min)),
        on_own_session(lambda db: _strategies(db, window)),
        on_own_session(lambda db: pressure(db, window)),
        on_own_session(lambda db: _mcp_tools(db, window)),
    )
    starts = window.starts()
    turns = [
        _turn_point(start, turn_sums[i]) if i in turn_sums else TurnPoint(start=start)
        for i, start in enumerate(starts)
    ]
    compactions = [
        _compaction_point(start, compaction_sums[i]) if i in compaction_sums else CompactionPoint(start=start)
        for i, start in enumerate(starts)
    ]
    measured = [_turn_point(window.start, entry) for entry in turn_sums.values()]
    attempts = sum(s.count for s in strategies)
    succeeded = sum(s.completed for s in strategies)
    ttft_p50, ttft_p95 = _all(turn_sums.values()).spread
    duration_p50, duration_p95 = _all(compaction_sums.values()).spread
    return Summary(
        window=WindowOut(
            name=window_name,
            start=window.start,
            end=window.end,
            bucket_seconds=int(window.bucket.total_seconds()),
        ),
        totals=Totals(
            turns=sum(b.turns for b in measured),
            running_turns=running,
            refusals=sum(b.refusals for b in measured),
            overflow_errors=sum(b.overflow_errors for b in measured),
            failed_turns=sum(b.failed for b in measured),
            utilization_max=max(
                (b.utilization_max for b in measured if b.utilization_max is not None), default=None
            ),
            compactions=attempts,
            compactions_completed=succeeded,
            compaction_success_rate=succeeded / attempts if attempts else None,
            tokens_saved=sum(s.tokens_saved for s in strategies),
            compaction_duration_p50_ms=duration_p50,
            compaction_duration_p95_ms=duration_p95,
            ttft_p50_ms=ttft_p50,
            ttft_p95_ms=ttft_p95,
            retention_avg=_summary_retention(strategies),
        ),
        compactions_by_strategy=strategies,
        turns=turns,
        compactions=compactions,
        pressure=pressed,
        mcp_tools=mcp_tools,
    )
