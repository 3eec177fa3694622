"""UnifiedContextGuard: the pre-model hook that keeps every model request within budget.

LangGraph calls it before every model call of a turn (pre-turn and after each tool round).
Each call runs the stages of SPEC 5.2 on the view:

1. source stages (tool outputs, then any other source) on the messages not seen before;
2. the summary stage, when one is configured and the effective estimate reaches the trigger;
3. the emergency stage: the largest source-owned messages re-rendered under the stricter
   policy until the estimate is back under the trigger;
4. refusal (`ContextRefused`) when the request still cannot fit the available input, or the
   latest user message alone exceeds it.

It returns `llm_input_messages` on every call (a stale value would otherwise be reused by
LangGraph) and `messages` upserts (same ids) for what it compacted, so the request-local state
holds what the model saw. A call costs O(new messages): counts and per-source totals are kept
by `ContextView`, and the calibration, estimate and metrics work from those totals.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from time import perf_counter
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, RemoveMessage, SystemMessage, ToolMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from chat_shell.compression import metrics as context_metrics
from chat_shell.compression.budget import Budget, budget_for
from chat_shell.compression.calibration import Estimate, Fit, Reported, Sample, estimate, fit
from chat_shell.compression.token_counter import REPLY_PRIMING, MessageCount, TokenCounter
from chat_shell.contracts import (
    CompactionRecord,
    ContextCompactionEvent,
    ContextMetrics,
    ContextMetricsEvent,
    ContextState,
)
from chat_shell.guard.protocol import ContextRefused, EventSink
from chat_shell.guard.stages import (
    GuardSource,
    SourceContext,
    SummaryCompactor,
    SummaryRequest,
    compaction_target,
)
from chat_shell.guard.tool_output import ToolOutputSource
from chat_shell.guard.view import ContextView
from chat_shell.messages.markers import MARKER_KEY, is_summary, with_markers
from chat_shell.providers.profiles import ModelProfile
from chat_shell.telemetry import record_protection

logger = logging.getLogger(__name__)


@dataclass
class _Request:
    """One model request the guard shaped, and what the provider said about it."""

    length: int
    last_id: str | None
    # Where the view stood when the request was sent (see `ContextView.unchanged_prefix`).
    mark: tuple[int, int]
    message_tokens: int
    local: int
    provider: int | None = None
    response_id: str | None = None


@dataclass
class _Cut:
    """What one source cut in one stage of one call, for the trace event and the log."""

    messages: int = 0
    before: int = 0
    after: int = 0
    seconds: float = 0.0


def _provider_input(message: AIMessage) -> int | None:
    usage = message.usage_metadata
    tokens = usage.get("input_tokens") if usage else None
    return tokens if isinstance(tokens, int) and tokens > 0 else None


class UnifiedContextGuard:
    def __init__(
        self,
        profile: ModelProfile,
        *,
        emit: EventSink,
        tool_schemas: Sequence[Mapping[str, Any]] = (),
        sources: Sequence[GuardSource] | None = None,
        summary_compactor: SummaryCompactor | None = None,
        force_compaction: bool = False,
        counter: TokenCounter | None = None,
    ) -> None:
        self.profile = profile
        self.budget: Budget = budget_for(profile)
        self.counter = counter or TokenCounter.for_profile(profile)
        self._emit = emit
        self._sources: tuple[GuardSource, ...] = (
            tuple(sources) if sources is not None else (ToolOutputSource(),)
        )
        self._self_traced = frozenset(s.name for s in self._sources if s.adds_content)
        self._summary = summary_compactor
        self._force = force_compaction
        self._ctx = SourceContext(counter=self.counter, budget=self.budget)
        self._schema_tokens = self.counter.count_tool_schemas(tool_schemas)
        self._view = ContextView(self.counter, self._attribute)
        self._requests: list[_Request] = []
        self._marker_samples: list[tuple[str | None, Sample]] = []
        self._live_samples: list[tuple[str | None, Sample]] = []
        self._fit: Fit | None = None
        self._fit_key = (0, 0)
        self._compactions: list[CompactionRecord] = []
        self._throttle = context_metrics.MetricsThrottle()
        self._calls = 0
        self._refused = False

    # ------------------------------------------------------------------ the hook

    async def __call__(self, state: dict[str, Any]) -> dict[str, Any]:
        phase = "pre_turn" if self._calls == 0 else "mid_turn"
        self._calls += 1
        forced, self._force = self._force, False
        view = self._view
        self._observe(view.sync(state["messages"]))
        await self._prepare_sources()

        upserts: dict[str, BaseMessage] = {}
        rewritten = False
        changed = self._source_stage(upserts)
        current = before = self._estimate()
        # A user message that alone exceeds the input is refused before anything is summarized.
        if self._oversized_user() is not None:
            self._check_fits(current, phase)
        if self._summary is not None and (forced or current.effective >= self.budget.trigger):
            rewritten = await self._summary_stage(current, forced, upserts)
            changed = changed or rewritten
            current = self._estimate()
            if not rewritten:
                # A summary that failed is not retried on every later call of this attempt (a
                # provider that is down would cost a timeout per tool round): the emergency
                # stage carries the attempt; the next attempt or turn tries again.
                self._summary = None
        # Forced (the provider overflowed although the estimate fit): shrink to keep or below.
        target = compaction_target(self.budget, before, forced=True) if forced else self.budget.trigger
        if current.effective > target:
            current, truncated = self._emergency_stage(current, target, upserts)
            changed = changed or truncated
        if current.effective > target:
            current, dropped = self._drop_tail(current, target, upserts)
            rewritten = rewritten or dropped
            changed = changed or dropped
        self._check_fits(current, phase)

        self._record_request(current)
        self._publish(phase, current, changed=changed)
        update: dict[str, Any] = {"llm_input_messages": list(view.shown)}
        if rewritten:
            update["messages"] = [RemoveMessage(id=REMOVE_ALL_MESSAGES), *view.state]
        elif upserts:
            update["messages"] = list(upserts.values())
        return update

    # ------------------------------------------------------------------ end of turn

    def annotate_responses(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """`messages` with a `token_count` marker on every message that lacks a valid one, and
        a calibration sample (local tokens of the request as sent, provider input tokens,
        profile) on each AIMessage that answered a request this guard shaped."""
        messages = list(messages)
        view = self._view
        self._observe(view.sync(messages))
        responses = {r.length: r for r in self._requests if self._answers(messages, r)}
        annotated: list[BaseMessage] = []
        for index, message in enumerate(messages):
            fields: dict[str, Any] = {}
            if not view.marked[index]:
                if view.state[index] is view.shown[index]:
                    count = MessageCount(view.tokens[index], view.hashes[index])
                else:
                    count = self.counter.count_message(message)
                fields["token_count"] = self.counter.marker(count)
            request = responses.get(index)
            already = (message.additional_kwargs.get(MARKER_KEY) or {}).get("local_input_tokens")
            if request is not None and isinstance(message, AIMessage) and already is None:
                fields["local_input_tokens"] = request.local
                fields["provider_input_tokens"] = _provider_input(message)
                fields["profile"] = self.profile.name
            if fields:
                message = with_markers(message, **fields)
                view.adopt(index, message)
            annotated.append(message)
        return annotated

    def final_metrics(self, messages: Sequence[BaseMessage]) -> ContextMetrics:
        """The end-of-turn snapshot over the authoritative final state: what the next turn
        starts from. Not emitted; the runtime stores it on the assistant message."""
        self._observe(self._view.sync(messages))
        return self._snapshot("final", self._estimate())

    @property
    def compactions(self) -> list[CompactionRecord]:
        return list(self._compactions)

    # ------------------------------------------------------------------ accounting

    def _attribute(self, message: BaseMessage, tokens: int) -> dict[str, int]:
        claims: dict[str, int] = {}
        for source in self._sources:
            if source.applies_to(message):
                for bucket, n in source.attribute(message, tokens, self._ctx).items():
                    claims[bucket] = claims.get(bucket, 0) + n
        return claims

    def _observe(self, first_new: int) -> None:
        """Calibration samples from the new messages: persisted ones on earlier turns' replies,
        and the provider's answer to this guard's latest request."""
        view = self._view
        if first_new == 0:
            self._marker_samples.clear()
            self._fit = None
        for message in view.state[first_new:]:
            if not isinstance(message, AIMessage):
                continue
            raw = message.additional_kwargs.get(MARKER_KEY) or {}
            local, provider = raw.get("local_input_tokens"), raw.get("provider_input_tokens")
            if (
                isinstance(local, int)
                and isinstance(provider, int)
                and raw.get("profile") == self.profile.name
            ):
                self._marker_samples.append((message.id, Sample(local, provider)))
        if self._requests:
            request = self._requests[-1]
            if request.response_id is None and self._answers(view.state, request):
                response = view.state[request.length]
                assert isinstance(response, AIMessage)
                request.response_id = response.id
                request.provider = _provider_input(response)
                if request.provider is not None:
                    self._live_samples.append((response.id, Sample(request.local, request.provider)))

    @staticmethod
    def _answers(messages: Sequence[BaseMessage], request: _Request) -> bool:
        """Whether the message right after the request's last message is its reply."""
        index = request.length
        return (
            index < len(messages)
            and isinstance(messages[index], AIMessage)
            and (index == 0 or messages[index - 1].id == request.last_id)
        )

    def _calibration(self) -> Fit:
        """The fit over this profile's samples, recomputed only when a sample arrives."""
        key = (len(self._marker_samples), len(self._live_samples))
        if self._fit is None or self._fit_key != key:
            live_ids = {message_id for message_id, _ in self._live_samples}
            samples = [s for message_id, s in self._marker_samples if message_id not in live_ids]
            samples += [s for _, s in self._live_samples]
            self._fit = fit(samples, self.budget.overhead_tokens)
            self._fit_key = key
        return self._fit

    def _estimate(self) -> Estimate:
        view = self._view
        reported = None
        for request in reversed(self._requests):
            if request.provider is None:
                continue
            if view.unchanged_prefix(request.mark, request.length):
                reported = Reported(request.provider, view.message_tokens - request.message_tokens)
            break
        local = view.message_tokens + self._schema_tokens + REPLY_PRIMING
        return estimate(
            local, overhead_tokens=self.budget.overhead_tokens, fit=self._calibration(), reported=reported
        )

    def _record_request(self, current: Estimate) -> None:
        view = self._view
        last_id = view.state[-1].id if len(view) else None
        self._requests.append(_Request(len(view), last_id, view.mark(), view.message_tokens, current.local))

    # ------------------------------------------------------------------ stages

    def _apply(self, index: int, shown: BaseMessage, upserts: dict[str, BaseMessage]) -> None:
        """Show `shown` at `index`; upsert it into state unless the message has no id (an
        upsert without id would append a duplicate), in which case only the view changes."""
        in_state = shown.id is not None
        self._view.replace(index, shown, in_state=in_state)
        if in_state:
            upserts[str(shown.id)] = shown

    def _owner(self, message: BaseMessage) -> GuardSource | None:
        return next((s for s in self._sources if s.applies_to(message)), None)

    async def _prepare_sources(self) -> None:
        """Let the sources fetch what the new messages need (I/O) before the source stage."""
        view = self._view
        new = view.shown[view.settled :]
        if new:
            for source in self._sources:
                await source.prepare(new, self._ctx)

    def _source_stage(self, upserts: dict[str, BaseMessage]) -> bool:
        view = self._view
        cuts: dict[str, _Cut] = {}
        for index in range(view.settled, len(view)):
            for source in self._sources:
                shown = view.shown[index]
                if not source.applies_to(shown):
                    continue
                started = perf_counter()
                rendered = source.render(shown, view.tokens[index], self._ctx, emergency=False)
                if rendered is None:
                    continue
                before = view.tokens[index]
                self._apply(index, rendered, upserts)
                cut = cuts.setdefault(source.name, _Cut())
                cut.messages += 1
                cut.before += before
                cut.after += view.tokens[index]
                cut.seconds += perf_counter() - started
                logger.info(
                    "[UnifiedContextGuard] %s compacted message_id=%s tokens %d->%d",
                    source.name,
                    rendered.id,
                    before,
                    view.tokens[index],
                )
        view.settled = len(view)
        traced = {name: cut for name, cut in cuts.items() if name not in self._self_traced}
        self._trace(traced, emergency=False)
        return bool(cuts)

    async def _summary_stage(self, current: Estimate, forced: bool, upserts: dict[str, BaseMessage]) -> bool:
        assert self._summary is not None
        view = self._view
        outcome = await self._summary(
            SummaryRequest(
                messages=list(view.shown),
                message_tokens=list(view.tokens),
                fixed_tokens=self._schema_tokens + REPLY_PRIMING,
                estimate=current,
                budget=self.budget,
                counter=self.counter,
                emit=self._emit,
                forced=forced,
            )
        )
        self._compactions.append(outcome.record)
        if outcome.messages is None:
            return False
        # The summary replaces the whole state; earlier upserts are part of what it rewrote.
        upserts.clear()
        self._observe(view.sync(outcome.messages))
        self._source_stage(upserts)
        return True

    def _emergency_stage(
        self, current: Estimate, target: int, upserts: dict[str, BaseMessage]
    ) -> tuple[Estimate, bool]:
        view = self._view
        started = perf_counter()
        before = current.effective
        candidates = sorted(
            (-view.tokens[i], i) for i in range(len(view)) if self._owner(view.shown[i]) is not None
        )
        cuts: dict[str, _Cut] = {}
        for _, index in candidates:
            if current.effective <= target:
                break
            shown = view.shown[index]
            source = self._owner(shown)
            assert source is not None
            render_started = perf_counter()
            rendered = source.render(shown, view.tokens[index], self._ctx, emergency=True)
            old = view.tokens[index]
            if rendered is None or self.counter.count_message(rendered).tokens >= old:
                continue
            self._apply(index, rendered, upserts)
            cut = cuts.setdefault(source.name, _Cut())
            cut.messages += 1
            cut.before += old
            cut.after += view.tokens[index]
            cut.seconds += perf_counter() - render_started
            current = self._estimate()
        if not cuts:
            return current, False
        self._trace(cuts, emergency=True)
        record = CompactionRecord(
            strategy="emergency_truncate",
            status="completed",
            before_tokens=before,
            after_tokens=current.effective,
            trigger=self.budget.trigger,
            keep=self.budget.keep,
            removed_items=sum(c.messages for c in cuts.values()),
            duration_ms=round((perf_counter() - started) * 1000, 3),
            created_at=datetime.now(UTC),
        )
        self._compactions.append(record)
        self._emit(ContextCompactionEvent(record=record))
        logger.warning(
            "[UnifiedContextGuard] emergency re-truncation rewrote=%d tokens %d->%d target=%d",
            record.removed_items,
            before,
            current.effective,
            target,
        )
        return current, True

    def _drop_tail(
        self, current: Estimate, target: int, upserts: dict[str, BaseMessage]
    ) -> tuple[Estimate, bool]:
        """The last resort before refusal: drop the oldest messages after the system prompt and
        summary, whole tool rounds at a time, until the estimate is within `target`. The latest
        user message and the newest round after it (what the model must answer) always stay."""
        view = self._view
        started = perf_counter()
        shown = view.shown
        first = 0
        while first < len(view) and (isinstance(shown[first], SystemMessage) or is_summary(shown[first])):
            first += 1
        # Groups of indices: a message, with the tool results that answer it.
        groups: list[list[int]] = []
        for index in range(first, len(view)):
            if isinstance(shown[index], ToolMessage) and groups:
                groups[-1].append(index)
            else:
                groups.append([index])
        latest = view.latest_human
        before = [g for g in groups if latest is None or g[0] < latest]
        after = [g for g in groups if latest is not None and g[0] > latest][:-1]
        local, dropped = current.local, set[int]()
        projected = current
        for group in [*before, *after]:
            if projected.effective <= target:
                break
            dropped.update(group)
            local -= sum(view.tokens[i] for i in group)
            # A rewrite voids the provider's report: the calibrated estimates remain.
            projected = estimate(
                local, overhead_tokens=self.budget.overhead_tokens, fit=current.fit, reported=None
            )
        if not dropped:
            return current, False
        kept = [message for index, message in enumerate(shown) if index not in dropped]
        upserts.clear()
        self._observe(view.sync(kept))
        self._source_stage(upserts)
        after_estimate = self._estimate()
        record = CompactionRecord(
            strategy="tail_drop",
            status="completed",
            before_tokens=current.effective,
            after_tokens=after_estimate.effective,
            trigger=self.budget.trigger,
            keep=self.budget.keep,
            removed_items=len(dropped),
            duration_ms=round((perf_counter() - started) * 1000, 3),
            created_at=datetime.now(UTC),
        )
        self._compactions.append(record)
        self._emit(ContextCompactionEvent(record=record))
        logger.warning(
            "[UnifiedContextGuard] emergency tail drop removed=%d tokens %d->%d target=%d",
            len(dropped),
            current.effective,
            after_estimate.effective,
            target,
        )
        return after_estimate, True

    def _trace(self, cuts: Mapping[str, _Cut], *, emergency: bool) -> None:
        for name, cut in cuts.items():
            record_protection(
                name,
                "applied",
                duration_ms=round(cut.seconds * 1000, 3),
                before_tokens=cut.before,
                after_tokens=cut.after,
                messages_truncated=cut.messages,
                emergency=emergency,
            )

    def _oversized_user(self) -> int | None:
        """The tokens of the latest user message when it alone exceeds the available input."""
        view = self._view
        if view.latest_human is None or view.tokens[view.latest_human] <= self.budget.available_input:
            return None
        return view.tokens[view.latest_human]

    def _check_fits(self, current: Estimate, phase: str) -> None:
        available = self.budget.available_input
        model = self.profile.name
        message: str | None = None
        needed = current.effective
        oversized = self._oversized_user()
        if oversized is not None:
            needed = oversized
            message = (
                f"Your message is about {needed:,} tokens, but {model} accepts at most {available:,} "
                f"input tokens, so it is {needed - available:,} tokens too long. Shorten it or split it "
                f"into several messages."
            )
        elif current.effective > available:
            parts = context_metrics.attribute(
                self._local_parts(), effective=current.effective, fixed_overhead=current.fixed_overhead
            )
            largest = sorted(((n, s) for s, n in parts.items() if n), reverse=True)[:3]
            listing = ", ".join(f"{s.replace('_', ' ')} {n:,}" for n, s in largest)
            message = (
                f"This request needs about {needed:,} input tokens, but {model} accepts at most "
                f"{available:,}: {needed - available:,} tokens too many even after compaction. "
                f"Largest parts (tokens): {listing}. Start a new conversation or ask for less at once."
            )
        if message is None:
            return
        self._refused = True
        self._publish(phase, current, changed=True)
        logger.warning("[UnifiedContextGuard] refused: %s", message)
        raise ContextRefused(message, needed_tokens=needed, available_tokens=available)

    # ------------------------------------------------------------------ metrics

    def _local_parts(self) -> dict[str, int]:
        parts = self._view.local_parts()
        parts["tool_schemas"] = parts.get("tool_schemas", 0) + self._schema_tokens
        parts["system"] = parts.get("system", 0) + REPLY_PRIMING
        return parts

    def _state(self, current: Estimate) -> ContextState:
        return context_metrics.context_state(
            effective=current.effective,
            budget=self.budget,
            refused=self._refused,
            compacted=any(r.status == "completed" for r in self._compactions),
        )

    def _snapshot(self, phase: str, current: Estimate) -> ContextMetrics:
        return context_metrics.snapshot(
            phase=phase,
            profile=self.profile,
            budget=self.budget,
            estimate=current,
            local_parts=self._local_parts(),
            state=self._state(current),
            latest_compaction=self._compactions[-1] if self._compactions else None,
        )

    def _publish(self, phase: str, current: Estimate, *, changed: bool) -> None:
        pressure = context_metrics.pressure(
            effective=current.effective, budget=self.budget, state=self._state(current)
        )
        if self._throttle.should_emit(pressure, changed=changed):
            self._emit(ContextMetricsEvent(snapshot=self._snapshot(phase, current)))
