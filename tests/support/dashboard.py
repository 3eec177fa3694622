"""Stored turns and compaction rows for dashboard tests and the operators benchmark.

Written with bulk inserts straight into the tables the backend fills when turns finish
(`turns`, `messages`, `compaction_events`), so a test can place figures at chosen times; the
dashboard's hourly rollups get the same figures through the service's own staging and write
(`services.dashboard.rollups`), as finishing turns and recording compactions do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from backend.models import CompactionEvent, Conversation, Message, Turn, User
from backend.services.dashboard import rollups


@dataclass(frozen=True)
class StoredTurn:
    started_at: datetime
    used: int
    available: int = 7_000
    ttft_ms: float | None = 120.0
    refused: bool = False
    overflow_errors: int = 0
    status: str = "completed"
    reason: str = "normal_completion"
    profile: str = "gpt-4o-mini"


@dataclass(frozen=True)
class StoredCompaction:
    created_at: datetime
    strategy: str = "summary_compact"
    status: str = "completed"
    before: int = 6_000
    after: int = 2_000
    duration_ms: float = 900.0
    retention: float | None = 0.9
    failure_reason: str | None = None


def snapshot(used: int, available: int, window: int = 8_192) -> dict[str, Any]:
    """A final context snapshot as the runtime stores it on the assistant message."""
    return {
        "phase": "final",
        "profile": "gpt-4o-mini",
        "profile_source": "configured",
        "context_window": window,
        "reserved_output": window - available,
        "available_input": available,
        "used_input": used,
        "remaining": available - used,
        "remaining_percent": round((available - used) / available * 100, 1),
        "trigger": int(available * 0.85),
        "keep": int(available * 0.45),
        "over_trigger": used >= available * 0.85,
        "state": "warning" if used >= available * 0.85 else "normal",
        "breakdown": {"system": 300, "tool_schemas": 100, "history": max(0, used - 440), "current_input": 40},
    }


async def store_metrics(
    db: AsyncSession,
    owner: str,
    turns: Sequence[StoredTurn],
    compactions: Sequence[StoredCompaction] = (),
    *,
    full_snapshots: bool = True,
) -> int:
    """One conversation of `owner` holding the given finished turns and compaction rows."""
    owner_id = await db.scalar(select(User.id).where(User.username == owner))
    assert owner_id is not None, f"no user {owner}"
    conversation = Conversation(owner_id=owner_id, title="metrics", next_message_id=2 * len(turns) + 1)
    db.add(conversation)
    await db.flush()
    messages = []
    for index, turn in enumerate(turns):
        for offset, role in ((1, "user"), (2, "assistant")):
            result = None
            if role == "assistant":
                result = {"value": "ok", "blocks": []}
                if full_snapshots:
                    result["context_metrics"] = snapshot(turn.used, turn.available)
            messages.append(
                {
                    "conversation_id": conversation.id,
                    "message_id": 2 * index + offset,
                    "role": role,
                    "status": turn.status if role == "assistant" else "completed",
                    "content": "question" if role == "user" else "",
                    "result": result,
                    "created_at": turn.started_at,
                    "updated_at": turn.started_at,
                }
            )
    pks: list[int] = []
    for chunk in range(0, len(messages), 2_000):
        rows = await db.execute(insert(Message).returning(Message.id), messages[chunk : chunk + 2_000])
        pks += list(rows.scalars())
    turn_rows = [
        {
            "conversation_id": conversation.id,
            "user_message_pk": pks[2 * index],
            "assistant_message_pk": pks[2 * index + 1],
            "status": turn.status,
            "started_at": turn.started_at,
            "ended_at": turn.started_at,
            "model_profile": turn.profile,
            "termination_reason": turn.reason,
            "input_tokens": turn.used,
            "output_tokens": 50,
            "context_used_tokens": turn.used,
            "context_available_tokens": turn.available,
            "context_window": 8_192,
            "ttft_ms": turn.ttft_ms,
            "overflow_errors": turn.overflow_errors,
            "refused": turn.refused,
            "last_seq": 1,
        }
        for index, turn in enumerate(turns)
    ]
    turn_ids: list[int] = []
    for chunk in range(0, len(turn_rows), 2_000):
        rows = await db.execute(
            insert(Turn).returning(Turn.id, sort_by_parameter_order=True), turn_rows[chunk : chunk + 2_000]
        )
        turn_ids += list(rows.scalars())
    finished = [Turn(id=turn_id, **row) for turn_id, row in zip(turn_ids, turn_rows, strict=True)]
    rollups.stage_turns(db, [rollups.turn_row(turn) for turn in finished])
    rollups.stage_pressure(db, [rollups.pressure_row(turn) for turn in finished])
    compaction_rows = [
        {
            "conversation_id": conversation.id,
            "model_profile": "gpt-4o-mini",
            "strategy": c.strategy,
            "status": c.status,
            "before_tokens": c.before,
            "after_tokens": c.after,
            "tokens_saved": max(0, c.before - c.after) if c.status == "completed" else 0,
            "duration_ms": c.duration_ms,
            "failure_reason": c.failure_reason,
            "retention_score": c.retention,
            "created_at": c.created_at,
        }
        for c in compactions
    ]
    for chunk in range(0, len(compaction_rows), 2_000):
        await db.execute(insert(CompactionEvent), compaction_rows[chunk : chunk + 2_000])
    rollups.stage_compactions(db, [rollups.compaction_row(CompactionEvent(**row)) for row in compaction_rows])
    await rollups.write_staged(db)
    return conversation.id
