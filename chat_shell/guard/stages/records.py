"""The one builder of compaction records (SPEC 5.3): every stage that shrinks the request
(summary compaction, the emergency trim, the tail drop) records its attempts through it, so a
record always carries the same fields the same way."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from time import perf_counter
from typing import Any, Literal

from chat_shell.accounting.budget import Budget
from chat_shell.contracts import FINAL_STATUSES, CompactionRecord, CompactionStrategy

Strategy = CompactionStrategy
Status = Literal["started", "in_progress", "completed", "fallback"]


@dataclass(frozen=True)
class Compaction:
    """One compaction from its start: each of its records shares these fields."""

    strategy: Strategy
    before_tokens: int
    trigger: int
    keep: int
    created_at: datetime
    started: float

    @classmethod
    def start(cls, strategy: Strategy, budget: Budget, before_tokens: int) -> Compaction:
        return cls(strategy, before_tokens, budget.trigger, budget.keep, datetime.now(UTC), perf_counter())

    def record(self, status: Status, **fields: Any) -> CompactionRecord:
        if status in FINAL_STATUSES:
            fields["duration_ms"] = round((perf_counter() - self.started) * 1000, 3)
        return CompactionRecord(
            strategy=self.strategy,
            status=status,
            before_tokens=self.before_tokens,
            trigger=self.trigger,
            keep=self.keep,
            created_at=self.created_at,
            **fields,
        )
