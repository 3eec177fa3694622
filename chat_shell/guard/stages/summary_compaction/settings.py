"""The settings of summary compaction that are not token sizes, with their defaults stated once.

Token sizes (trigger, keep, the chunk sent to the summarizer, the summary cap) belong to the
model profile's budget (`chat_shell.accounting.budget`); these are the runtime's: how long one
summarizer call may take, and how often a compaction in progress reports that it is alive.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CompactionSettings:
    # The time limit of one summarizer call (the provider timeout and the in-process backstop).
    summary_timeout_seconds: float = 120.0
    # How often a `context.compaction` `in_progress` status is emitted while a summary is written.
    heartbeat_seconds: float = 5.0
