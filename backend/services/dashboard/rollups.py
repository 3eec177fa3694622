"""Keeping the dashboard's hourly rollups (`models.rollups`) equal to the raw rows.

Each turn and compaction row contributes figures to one rollup row (its hour x model profile x
value bin). Callers stage contributions in the transaction that writes the raw row: a turn
counts when it starts, and when it finishes its running contribution is swapped for the finished
one. Staged figures are merged per rollup row, and the transaction writes them as its last step
(`write_staged`, called explicitly by whoever owns the transaction) as upserts that add to the
stored sums, in one global key order: two transactions finishing turns of the same hour
serialize on the row (PostgreSQL) instead of losing an update, and never lock the same rows in
opposite orders (no deadlocks). Written earlier, in the middle of a transaction, a rollup row
would be locked before the rows the transaction writes after it.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, case
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from backend.models import (
    CompactionEvent,
    CompactionHour,
    ConversationPressure,
    McpToolHour,
    Turn,
    TurnHour,
    TurnStatus,
)
from backend.models.base import utcnow
from backend.models.rollups import NO_BIN, NO_PROFILE
from backend.services.dashboard import percentiles
from backend.services.dashboard.windows import hour_of, utilization

Row = dict[str, Any]
_STAGED = "dashboard_rollups"
# Rows per upsert statement, well under SQLite's bound-parameter limit.
_CHUNK = 500


@dataclass(frozen=True)
class _Shape:
    """Which columns of a rollup table are keys, added up, or kept as the lowest or highest."""

    table: Table
    keys: tuple[str, ...]
    sums: tuple[str, ...]
    lows: tuple[str, ...]
    highs: tuple[str, ...]


TURNS = _Shape(
    TurnHour.__table__,  # type: ignore[arg-type]
    keys=("hour", "model_profile", "ttft_bin"),
    sums=("turns", "utilization_sum", "utilization_count", "refusals", "overflow_errors", "failed"),
    lows=("ttft_min",),
    highs=("utilization_max", "ttft_max"),
)
COMPACTIONS = _Shape(
    CompactionHour.__table__,  # type: ignore[arg-type]
    keys=("hour", "model_profile", "strategy", "status", "duration_bin"),
    sums=("attempts", "tokens_saved", "retention_sum", "retention_count"),
    lows=("retention_min", "duration_min"),
    highs=("duration_max",),
)

MCP_TOOLS = _Shape(
    McpToolHour.__table__,  # type: ignore[arg-type]
    keys=("hour", "server", "tool", "duration_bin"),
    sums=("calls", "errors", "timeouts"),
    lows=("duration_min",),
    highs=("duration_max",),
)
# MCP call outcomes counted as errors (a server gone mid-call is one); timeouts are their own.
MCP_ERROR_OUTCOMES = frozenset({"error", "unavailable"})

PRESSURE: Table = ConversationPressure.__table__  # type: ignore[assignment]


def utilization_of(turn: Turn) -> float | None:
    return utilization(turn.context_used_tokens, turn.context_available_tokens)


def turn_row(turn: Turn) -> Row:
    """What one turn, as it stands, adds to its rollup row (same figures as the raw queries)."""
    share = utilization_of(turn)
    ttft_bin = percentiles.bin_index(turn.ttft_ms)
    return {
        "hour": hour_of(turn.started_at),
        "model_profile": turn.model_profile or NO_PROFILE,
        "ttft_bin": NO_BIN if ttft_bin is None else ttft_bin,
        "turns": 1,
        "utilization_sum": share or 0.0,
        "utilization_count": int(share is not None),
        "utilization_max": share,
        "refusals": int(bool(turn.refused)),
        "overflow_errors": turn.overflow_errors or 0,
        "failed": int(turn.status == TurnStatus.FAILED),
        "ttft_min": turn.ttft_ms,
        "ttft_max": turn.ttft_ms,
    }


def compaction_row(compaction: CompactionEvent) -> Row:
    duration_bin = percentiles.bin_index(compaction.duration_ms)
    retention = compaction.retention_score
    return {
        "hour": hour_of(compaction.created_at),
        "model_profile": compaction.model_profile or NO_PROFILE,
        "strategy": compaction.strategy,
        "status": compaction.status,
        "duration_bin": NO_BIN if duration_bin is None else duration_bin,
        "attempts": 1,
        "tokens_saved": compaction.tokens_saved or 0,
        "retention_sum": retention or 0.0,
        "retention_count": int(retention is not None),
        "retention_min": retention,
        "duration_min": compaction.duration_ms,
        "duration_max": compaction.duration_ms,
    }


def pressure_row(turn: Turn) -> Row | None:
    """The turn as its conversation's latest measured turn (None without a snapshot)."""
    if turn.context_used_tokens is None:
        return None
    return {
        "conversation_id": turn.conversation_id,
        "turn_id": turn.id,
        "started_at": turn.started_at,
        "utilization": utilization_of(turn),
    }


def stage_finished(db: AsyncSession, turn: Turn, running: Row) -> None:
    """A finished turn: its figures replace its running ones, and it may be its conversation's
    latest measured turn."""
    stage_turns(db, [turn_row(turn)], removed=[running])
    stage_pressure(db, [pressure_row(turn)])


def stage_pressure(db: AsyncSession, rows: Iterable[Row | None]) -> None:
    staged = _staged(db, PRESSURE)
    for row in rows:
        if row is not None:
            seen = staged.get((row["conversation_id"],))
            if seen is None or seen["turn_id"] < row["turn_id"]:
                staged[(row["conversation_id"],)] = row


def stage_turns(db: AsyncSession, added: Iterable[Row], removed: Iterable[Row] = ()) -> None:
    """Adds turns' figures (and takes back `removed`, a turn's earlier figures) at commit.

    Extremes are only ever widened: a turn's earlier figures carry none worth taking back (a
    running turn has no time to first token or utilisation yet).
    """
    staged = _staged(db, TURNS.table)
    for row in removed:
        _merge(
            staged,
            TURNS,
            {**row, **{c: -row[c] for c in TURNS.sums}, **dict.fromkeys(TURNS.lows + TURNS.highs)},
        )
    for row in added:
        _merge(staged, TURNS, row)


def stage_compactions(db: AsyncSession, rows: Iterable[Row]) -> None:
    staged = _staged(db, COMPACTIONS.table)
    for row in rows:
        _merge(staged, COMPACTIONS, row)


def stage_mcp_call(db: AsyncSession, server: str, tool: str, outcome: str, duration_ms: float | None) -> None:
    """Counts one finished MCP tool call in the hour it finished."""
    bin_index = percentiles.bin_index(duration_ms)
    row = {
        "hour": hour_of(utcnow()),
        "server": server,
        "tool": tool,
        "duration_bin": NO_BIN if bin_index is None else bin_index,
        "calls": 1,
        "errors": int(outcome in MCP_ERROR_OUTCOMES),
        "timeouts": int(outcome == "timeout"),
        "duration_min": duration_ms,
        "duration_max": duration_ms,
    }
    _merge(_staged(db, MCP_TOOLS.table), MCP_TOOLS, row)


def _staged(db: AsyncSession, table: Table) -> dict[tuple[Any, ...], Row]:
    staged: dict[str, dict[tuple[Any, ...], Row]] = db.info.setdefault(_STAGED, {})
    return staged.setdefault(table.name, {})


def _merge(staged: dict[tuple[Any, ...], Row], shape: _Shape, row: Row) -> None:
    key = tuple(row[c] for c in shape.keys)
    seen = staged.get(key)
    if seen is None:
        staged[key] = dict(row)
        return
    for column in shape.sums:
        seen[column] += row[column]
    for column in shape.lows:
        seen[column] = _pick(min, seen[column], row[column])
    for column in shape.highs:
        seen[column] = _pick(max, seen[column], row[column])


def _pick(choose: Any, a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else choose(a, b)


def _insert(dialect: str, table: Table, rows: Sequence[Row]) -> Any:
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    return insert(table).values(list(rows))


def _upserts(dialect: str, shape: _Shape, rows: Sequence[Row]) -> Any:
    stmt = _insert(dialect, shape.table, rows)
    stored, new = shape.table.c, stmt.excluded
    values: dict[str, Any] = {c: stored[c] + new[c] for c in shape.sums}
    # NULL-aware least/greatest that reads the same on both databases.
    for columns, beats in ((shape.lows, operator.lt), (shape.highs, operator.gt)):
        for column in columns:
            values[column] = case(
                (new[column].is_(None), stored[column]),
                (stored[column].is_(None) | beats(new[column], stored[column]), new[column]),
                else_=stored[column],
            )
    return stmt.on_conflict_do_update(index_elements=list(shape.keys), set_=values)


def _pressure_upserts(dialect: str, rows: Sequence[Row]) -> Any:
    stmt = _insert(dialect, PRESSURE, rows)
    new = stmt.excluded
    return stmt.on_conflict_do_update(
        index_elements=["conversation_id"],
        set_={c: new[c] for c in ("turn_id", "started_at", "utilization")},
        # Only a later turn replaces the stored one, whatever order transactions commit in.
        where=PRESSURE.c.turn_id < new.turn_id,
    )


async def write_staged(db: AsyncSession) -> None:
    """Writes the figures staged in this transaction; every transaction that stages calls it
    last, just before it commits (a rolled-back one discards its session and the figures)."""
    staged = db.info.pop(_STAGED, None)
    if not staged:
        return
    dialect = db.get_bind().dialect.name
    # Compactions, turns, MCP tools, then conversations, each in key order: every transaction
    # locks in one order.
    for shape in (COMPACTIONS, TURNS, MCP_TOOLS):
        rows = [staged[shape.table.name][key] for key in sorted(staged.get(shape.table.name, {}))]
        for start in range(0, len(rows), _CHUNK):
            await db.execute(_upserts(dialect, shape, rows[start : start + _CHUNK]))
    latest = staged.get(PRESSURE.name, {})
    rows = [latest[key] for key in sorted(latest)]
    for start in range(0, len(rows), _CHUNK):
        await db.execute(_pressure_upserts(dialect, rows[start : start + _CHUNK]))
