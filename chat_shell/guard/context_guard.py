"""UnifiedContextGuard: the pre-model hook that keeps every model request within budget.

LangGraph calls it before every model call of a turn (pre-turn and after each tool round).
Each call runs the stages of SPEC 5.2 on the view, in order, and nothing else:

1. source stages (tool outputs, then any other source) on the messages not seen before;
2. the summary stage, when one is configured and the effective estimate reaches the trigger;
3. the emergency stages: the largest source-owned messages re-rendered under the stricter
   policy, then the oldest rounds dropped, until the estimate is back under the trigger;
4. refusal (`ContextRefused`) when the request still cannot fit the available input, or the
   latest user message alone exceeds it.

What the request costs is the accountant's (`chat_shell.accounting.accountant`), what the
stages do is theirs (`chat_shell.guard.stages`), and which snapshots reach the stream is the
metrics tracker's. The guard returns `llm_input_messages` on every call (a stale value would
otherwise be reused by LangGraph) and `messages` upserts (same ids) for what it compacted, so
the request-local state holds what the model saw. A call costs O(new messages).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, NoReturn

from langchain_core.messages import BaseMessage, RemoveMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from chat_shell.accounting.accountant import Accountant
from chat_shell.accounting.budget import Budget
from chat_shell.accounting.calibration import Estimate
from chat_shell.accounting.token_counter import TokenCounter
from chat_shell.accounting.view import ContextView
from chat_shell.contracts import CompactionRecord, ContextCompactionEvent, ContextMetrics
from chat_shell.guard.metrics_tracker import ContextMetricsTracker
from chat_shell.guard.protocol import ContextRefused, EventSink, ToolOffer, fixed_tools, guidance_message
from chat_shell.guard.stages.emergency_trim import EmergencyTrim
from chat_shell.guard.stages.refusal import Refusal
from chat_shell.guard.stages.request_context import RequestContext
from chat_shell.guard.stages.source import GuardSource, SourceContext, SourceStages
from chat_shell.guard.stages.summary_compaction.request import SummaryOutcome, SummaryRequest, SummaryStage
from chat_shell.guard.stages.tail_drop import TailDrop
from chat_shell.guard.stages.tool_output import ToolOutputSource, paging_arguments
from chat_shell.providers.profiles import ModelProfile

logger = logging.getLogger(__name__)


class UnifiedContextGuard:
    def __init__(
        self,
        profile: ModelProfile,
        budget: Budget,
        *,
        emit: EventSink,
        tools: ToolOffer = fixed_tools(),
        sources: Sequence[GuardSource] | None = None,
        summary_compactor: SummaryStage | None = None,
        force_compaction: bool = False,
        counter: TokenCounter | None = None,
        guidance: str | None = None,
    ) -> None:
        self.budget = budget
        self.counter = counter or TokenCounter.for_profile(profile)
        self._emit = emit
        self._tools = tools
        # The paging argument of every tool offered so far in the attempt (tool name -> argument),
        # named in the hint of that tool's compacted outputs.
        self._paging: dict[str, str] = {}
        self._paged: set[tuple[tuple[str, ...], str]] = set()
        self._sources = SourceStages(
            sources if sources is not None else (ToolOutputSource(),),
            SourceContext(self.counter, budget, self._paging),
        )
        self._view = view = ContextView(self.counter, self._sources.attribute)
        # Counted in the first call only: the guidance is appended to that call's input alone.
        self._guidance_tokens = (
            self.counter.count_message(guidance_message(guidance)).tokens if guidance else 0
        )
        self._account = Accountant(profile.name, budget, self.counter, view, 0)
        self._summary = summary_compactor
        stages = RequestContext(view, self._account, self._sources, budget)
        self._emergency = (EmergencyTrim(stages), TailDrop(stages))
        self._refusal = Refusal(profile.name, budget, view, self._account.local_parts)
        self._metrics = ContextMetricsTracker(profile, budget, emit, self._account.local_parts)
        self._compactions: list[CompactionRecord] = []
        self._force = force_compaction
        self._calls = 0

    # ------------------------------------------------------------------ the hook

    async def __call__(self, state: dict[str, Any]) -> dict[str, Any]:
        phase = "pre_turn" if self._calls == 0 else "mid_turn"
        self._calls += 1
        forced, self._force = self._force, False
        budget, view, account = self.budget, self._view, self._account
        account.sync(state["messages"])
        if (tools_refused := self._refusal.too_many_tools(self._offered_tokens())) is not None:
            self._refuse(tools_refused, self._estimate(), phase)
        await self._sources.prepare(view)

        upserts: dict[str, BaseMessage] = {}
        rewritten = False
        changed = self._sources.apply(view, upserts)
        current = before = self._estimate()
        # A user message that alone exceeds the input is refused before anything is summarized.
        if self._refusal.oversized_user() is not None:
            self._refuse_if_over(current, phase)
        if self._summary is not None and (forced or current.effective >= budget.trigger):
            rewritten = await self._summarize(current, forced, upserts)
            changed = changed or rewritten
            current = self._estimate()
        # Forced (the provider overflowed although the estimate fit): shrink to keep or below.
        target = budget.compaction_target(before.effective, forced=True) if forced else budget.trigger
        for stage in self._emergency:
            if current.effective <= target:
                break
            record = stage(current, target, upserts)
            if record is not None:
                self._record(record)
                changed, rewritten = True, rewritten or stage.rewrites_state
                current = self._estimate()
        self._refuse_if_over(current, phase)

        account.record_request(current)
        self._guidance_tokens = 0
        self._metrics.publish(phase, current, self._compactions, changed=changed)
        update: dict[str, Any] = {"llm_input_messages": list(view.shown)}
        if rewritten:
            update["messages"] = [RemoveMessage(id=REMOVE_ALL_MESSAGES), *view.state]
        elif upserts:
            update["messages"] = list(upserts.values())
        return update

    def _summary_request(self, current: Estimate, forced: bool) -> SummaryRequest:
        view = self._view
        return SummaryRequest(
            messages=list(view.shown),
            message_tokens=list(view.tokens),
            fixed_tokens=self._account.fixed_tokens,
            estimate=current,
            budget=self.budget,
            counter=self.counter,
            emit=self._emit,
            forced=forced,
        )

    def _offered_tokens(self) -> int:
        """The schema tokens of the tools offered with the view as it stands (the tool set
        counts itself once per encoding, across turns)."""
        offered = self._tools(self._view.shown)
        if offered.key not in self._paged:
            self._paged.add(offered.key)
            self._paging.update(paging_arguments(offered.schemas))
        return offered.schema_tokens(self.counter)

    def _estimate(self) -> Estimate:
        """The estimate of the view as it stands, with the tools offered with it."""
        self._account.set_fixed(self._offered_tokens(), self._guidance_tokens)
        return self._account.estimate()

    async def _summarize(self, current: Estimate, forced: bool, upserts: dict[str, BaseMessage]) -> bool:
        """The summary stage; whether it rewrote the view."""
        assert self._summary is not None
        view = self._view
        outcome = await self._summary(self._summary_request(current, forced))
        self._compactions.append(outcome.record)  # the stage emitted its own statuses
        if outcome.messages is None:
            # A summary that failed is not retried on every later call of this attempt (a
            # provider that is down would cost a timeout per tool round): the emergency stages
            # carry the attempt; the next attempt or turn tries again.
            self._summary = None
            return False
        # The summary replaces the whole state; earlier upserts are part of what it rewrote.
        upserts.clear()
        self._account.sync(outcome.messages)
        self._sources.apply(view, upserts)
        return True

    async def compact_ahead(self, messages: Sequence[BaseMessage]) -> SummaryOutcome | None:
        """Between turns (compaction ahead of time): `messages` is what the next turn starts
        from, without its user message. Through the same source stages as a turn's first hook
        call, and summarized by the same stage when the estimate reaches the budget's
        pre-trigger. None when no summary is due (or this guard has no summary stage)."""
        if self._summary is None:
            return None
        self._account.sync(list(messages))
        await self._sources.prepare(self._view)
        self._sources.apply(self._view, {})
        current = self._estimate()
        if current.effective < self.budget.ahead_trigger:
            return None
        outcome = await self._summary(self._summary_request(current, forced=False))
        self._compactions.append(outcome.record)
        return outcome

    async def preview(self, messages: Sequence[BaseMessage]) -> tuple[list[BaseMessage], bool]:
        """What a turn starting from `messages` would send before its user message: the view
        after the source stages, and whether its estimate reaches the trigger (the turn would
        summarize first). Nothing is summarized, trimmed or emitted."""
        self._account.sync(list(messages))
        await self._sources.prepare(self._view)
        self._sources.apply(self._view, {})
        return list(self._view.shown), self._estimate().effective >= self.budget.trigger

    def _record(self, record: CompactionRecord) -> None:
        self._compactions.append(record)
        self._emit(ContextCompactionEvent(record=record))

    def _refuse_if_over(self, current: Estimate, phase: str) -> None:
        refused = self._refusal.check(current)
        if refused is not None:
            self._refuse(refused, current, phase)

    def _refuse(self, refused: ContextRefused, current: Estimate, phase: str) -> NoReturn:
        self._metrics.refused = True
        self._metrics.publish(phase, current, self._compactions, changed=True)
        logger.warning("[UnifiedContextGuard] refused: %s", refused.message)
        raise refused

    # ------------------------------------------------------------------ end of turn

    def annotate_responses(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """`messages` with their token counts and this guard's calibration samples marked."""
        return self._account.annotate_responses(messages)

    def final_metrics(self, messages: Sequence[BaseMessage]) -> ContextMetrics:
        """The end-of-turn snapshot over the authoritative final state: what the next turn
        starts from. Not emitted; the runtime stores it on the assistant message."""
        self._account.sync(messages)
        return self._metrics.snapshot("final", self._estimate(), self._compactions)

    @property
    def compactions(self) -> list[CompactionRecord]:
        return list(self._compactions)
