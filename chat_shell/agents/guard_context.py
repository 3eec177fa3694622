"""The one place a runtime's guards get their `GuardContext`: a turn's attempts, a compaction
ahead of time and the next turn's preview all start from the same `GuardBasis`, so a guard sees
the same profile, counter, readers and offered tools wherever it runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chat_shell.accounting.budget import Budget
from chat_shell.accounting.token_counter import TokenCounter
from chat_shell.guard.protocol import EventSink, GuardContext, Summarizer
from chat_shell.guard.stages.summary_compaction.settings import CompactionSettings
from chat_shell.host import TurnServices
from chat_shell.providers.profiles import ModelProfile
from chat_shell.tools.registry import AttemptTools, ToolRegistry, ToolSet


@dataclass(frozen=True)
class GuardBasis:
    """What every guard of one turn (or one between-turn call) shares."""

    profile: ModelProfile
    budget: Budget
    counter: TokenCounter
    # What the host serves (attachments for previews, the user-visible record for history tools).
    services: TurnServices
    tools: ToolRegistry
    # Summary compaction's model call (None: the guard has no summary stage), and its settings.
    summarizer: Summarizer | None = None
    compaction: CompactionSettings = field(default_factory=CompactionSettings)

    def offered(self, mcp: ToolSet | None = None) -> AttemptTools:
        """The tools a guard's model calls are offered, decided again on each call's view."""
        return AttemptTools(self.tools, can_browse_history=self.services.originals is not None, mcp=mcp)

    def context(
        self,
        *,
        conversation_id: int,
        turn_id: int,
        tools: AttemptTools,
        emit: EventSink,
        **per_guard: Any,
    ) -> GuardContext:
        """The context of one guard; `per_guard` carries what differs between guards (an
        attempt's forced compaction and guidance, the turn's input ids and assistant message)."""
        return GuardContext(
            profile=self.profile,
            budget=self.budget,
            counter=self.counter,
            conversation_id=conversation_id,
            turn_id=turn_id,
            tools=tools.offer,
            emit=emit,
            attachments=self.services.attachments,
            summarizer=self.summarizer,
            compaction=self.compaction,
            **per_guard,
        )
