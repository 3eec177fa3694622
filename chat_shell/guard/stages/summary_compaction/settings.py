"""The settings of summary compaction that are not token sizes, with their defaults stated once.

Token sizes (trigger, keep, the chunk sent to the summarizer, the summary cap) belong to the
model profile's budget (`chat_shell.accounting.budget`); these are the runtime's: how long one
summarizer call may take, how it samples, and how often a compaction in progress reports that it
is alive.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CompactionSettings:
    # The time limit of one summarizer call (the provider timeout and the in-process backstop).
    summary_timeout_seconds: float = 120.0
    # How often a `context.compaction` `in_progress` status is emitted while a summary is written.
    heartbeat_seconds: float = 5.0
    # The summarizer's sampling temperature. Greedy by default: a summary is a compression whose
    # worth is the facts it copies exactly, and sampling only loses some (bench_summary_facts:
    # 14/14 planted facts greedy against 15/28 with a local server's default sampling).
    summary_temperature: float = 0.0
