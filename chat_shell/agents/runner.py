"""One turn: attempts on fresh threads, streaming, endings, and the finalizer (SPEC 5.5).

Every attempt runs on its own `thread_id` with `durability="exit"`; whatever way it ends
(normally, by an exception, by cancellation) its authoritative state is read with
`aget_state`, the thread is deleted, and one persistence line is logged. The turn then ends
through the one finalizer, and the caller gets exactly one terminal event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from langchain_core.messages import AIMessage, BaseMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.config import get_stream_writer
from langgraph.errors import GraphRecursionError
from langgraph.graph.state import CompiledStateGraph

from chat_shell.agents.attempt_guidance import AttemptGuidance
from chat_shell.agents.attempts import (
    AttemptOutcome,
    AttemptPlan,
    Ending,
    next_attempt,
    refuse_repeated_overflow,
)
from chat_shell.agents.builder import AttemptRuntime, ToolCallTruncated, recursion_limit
from chat_shell.agents.finalizer import (
    finalize_turn,
    has_unexecuted_tool_calls,
    is_step_limit_reply,
    without_step_limit_reply,
)
from chat_shell.agents.serializer import serialize_chain
from chat_shell.agents.transcript import TurnTranscript
from chat_shell.agents.turn_context import TurnContext
from chat_shell.compression.budget import budget_for
from chat_shell.contracts import (
    ChainMessage,
    TerminationReason,
    TurnCancelled,
    TurnCompleted,
    TurnEvent,
    TurnFailed,
    TurnRequest,
    TurnResult,
    TurnStarted,
)
from chat_shell.guard.composition import chain_pre_model_hooks
from chat_shell.guard.protocol import (
    COMPACTION_HEARTBEAT_SECONDS,
    SUMMARY_TIMEOUT_SECONDS,
    ContextRefused,
    GuardContext,
    GuardFactory,
    Summarizer,
    TurnGuard,
)
from chat_shell.host import TurnServices
from chat_shell.messages.convert import initial_messages
from chat_shell.messages.markers import is_summary, markers
from chat_shell.messages.tool_pairs import sanitize_tool_pairs, tool_pair_count
from chat_shell.providers.errors import classify_provider_error
from chat_shell.providers.profiles import ModelProfile
from chat_shell.tools.registry import ToolRegistry, TurnFacts
from chat_shell.tools.turn_tools import TurnTools

logger = logging.getLogger("chat_shell.runtime")

STREAM_MODES = ["messages", "updates", "custom"]


class GraphSource(Protocol):
    def __call__(self, profile: ModelProfile, *, answer_only: bool) -> CompiledStateGraph: ...


@dataclass(frozen=True)
class TurnSetup:
    """What the runtime hands each turn (shared, read-only)."""

    profile: ModelProfile
    graphs: GraphSource
    checkpointer: BaseCheckpointSaver
    guard_factory: GuardFactory
    tools: ToolRegistry
    tool_call_limit: int
    truncation_retries: int
    system_prompt: str | None
    # What the host serves this turn (history, attachments, the user-visible record).
    services: TurnServices
    # Summary compaction's model call (None: the guard has no summary stage).
    summarizer: Summarizer | None = None
    summary_timeout_seconds: float = SUMMARY_TIMEOUT_SECONDS
    compaction_heartbeat_seconds: float = COMPACTION_HEARTBEAT_SECONDS


class _HistoryUnavailable(Exception):
    pass


class TurnExecution:
    def __init__(
        self,
        setup: TurnSetup,
        request: TurnRequest,
        cancel: asyncio.Event,
        emit: Callable[[TurnEvent], None],
    ) -> None:
        self.setup = setup
        self.request = request
        self.cancel = cancel
        self._emit = emit
        self.transcript = TurnTranscript()
        self.tools = TurnTools.for_turn(request, setup.profile, setup.services)
        self.guards: list[TurnGuard] = []
        self._overflows = 0
        self._terminated = False

    # -- events ----------------------------------------------------------------------------

    def emit(self, event: TurnEvent) -> None:
        if self._terminated:
            raise RuntimeError(f"event {event.type} after the terminal event")
        self._emit(event)

    def emit_from_graph(self, event: TurnEvent) -> None:
        """The guard's sink: inside a graph node the event joins the graph's ordered stream."""
        try:
            writer = get_stream_writer()
        except RuntimeError:
            self.emit(event)
            return
        writer(event)

    # -- the turn --------------------------------------------------------------------------

    async def execute(self) -> None:
        try:
            await self._execute()
        except Exception:
            logger.exception("turn %s failed inside chat_shell", self.request.turn_id)
            if not self._terminated:
                self._fail_without_chain("internal_error", "The turn failed because of an internal error.")

    async def _execute(self) -> None:
        profile = self.setup.profile
        self.emit(TurnStarted(model=profile.name, profile=profile.name))
        try:
            history = await self._history()
        except _HistoryUnavailable as exc:
            self._fail_without_chain("history_unavailable", str(exc))
            return
        turn, messages = TurnContext.start(
            self.request.turn_id, initial_messages(self.request, history, self.setup.system_prompt)
        )
        outcome = await self._attempt(AttemptPlan.first(messages), turn)
        while (
            plan := next_attempt(outcome, max_truncation_retries=self.setup.truncation_retries)
        ) is not None:
            outcome = await self._attempt(plan, turn)
        outcome = refuse_repeated_overflow(
            outcome, model=profile.name, available_tokens=budget_for(profile).available_input
        )
        self._finish(outcome, turn)

    async def _history(self) -> list[ChainMessage]:
        if self.request.history is not None:
            return self.request.history
        loader = self.setup.services.history
        if loader is None:
            raise _HistoryUnavailable("The request carries no history and no history loader is configured.")
        try:
            return await loader.load(self.request.conversation_id, self.request.user.message_id)
        except Exception as exc:
            logger.warning("history load failed for conversation %s: %r", self.request.conversation_id, exc)
            raise _HistoryUnavailable("The conversation history could not be loaded.") from exc

    # -- one attempt -----------------------------------------------------------------------

    async def _attempt(self, plan: AttemptPlan, turn: TurnContext) -> AttemptOutcome:
        setup = self.setup
        # Decided per attempt: a retry after a compaction may start from a checkpoint.
        offered = setup.tools.offered(
            TurnFacts(
                has_checkpoint=any(is_summary(message) for message in plan.seed),
                can_browse_history=self.tools.history is not None,
                has_attachments=any(markers(message).attachment_ids for message in plan.seed),
            )
        )
        guard = setup.guard_factory(
            GuardContext(
                profile=setup.profile,
                conversation_id=self.request.conversation_id,
                turn_id=self.request.turn_id,
                tool_schemas=offered.schemas,
                emit=self.emit_from_graph,
                original_input_ids=turn.original_input_ids,
                attachments=setup.services.attachments,
                force_compaction=plan.force_compaction,
                summarizer=setup.summarizer,
                summary_timeout_seconds=setup.summary_timeout_seconds,
                compaction_heartbeat_seconds=setup.compaction_heartbeat_seconds,
                assistant_message_id=self.request.assistant_message_id,
            )
        )
        self.guards.append(guard)
        graph = setup.graphs(setup.profile, answer_only=plan.answer_only)
        thread_id = turn.thread_id(plan.number)
        config: dict[str, Any] = {
            "configurable": {"thread_id": thread_id},
            "recursion_limit": recursion_limit(setup.tool_call_limit),
        }
        context = AttemptRuntime(
            hook=chain_pre_model_hooks(guard, AttemptGuidance(plan.guidance)),
            conversation_id=self.request.conversation_id,
            owner_id=self.request.owner_id,
            tools=offered,
            turn_tools=self.tools,
        )
        ending: Ending | None = None
        failure = None
        refusal = None
        # How the persistence line names an attempt that ends without an outcome.
        interrupted = "internal_error"
        try:
            ending = await self._run_graph(graph, plan.seed, config, context)
        except asyncio.CancelledError:
            interrupted = "abandoned"  # the caller stopped listening
            raise
        except GraphRecursionError:
            ending = "step_limit"
        except ToolCallTruncated:
            ending = "truncated"
        except ContextRefused as exc:
            ending, refusal = "refused", exc
        except Exception as exc:
            failure = classify_provider_error(exc)
            if failure is None:
                raise
            ending = "provider_error"
            self._overflows += failure.code == "context_overflow"
            logger.warning(
                "turn %s attempt %s: provider failure %s: %r", turn.turn_id, plan.number, failure.code, exc
            )
        finally:
            messages, pending = await self._close_thread(graph, config, plan, turn, ending or interrupted)
        if ending == "step_limit" and not pending and not _ends_waiting_for_tools(messages):
            # LangGraph checks its step budget before it notices the graph has finished.
            ending = "completed"
        if ending == "completed" and messages and is_step_limit_reply(messages[-1]):
            ending = "step_limit"
        return AttemptOutcome(plan, ending, messages, failure, refusal)

    async def _run_graph(
        self,
        graph: CompiledStateGraph,
        seed: list[BaseMessage],
        config: dict[str, Any],
        context: AttemptRuntime,
    ) -> Ending:
        """Stream the graph until it ends or the turn is cancelled."""
        stream_task = asyncio.create_task(self._consume(graph, seed, config, context))
        cancel_task = asyncio.create_task(self.cancel.wait())
        stopped = False
        try:
            await asyncio.wait({stream_task, cancel_task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            cancel_task.cancel()
            if not stream_task.done():
                stream_task.cancel()
                stopped = True
                await asyncio.wait({stream_task})
        # A cancelled read can surface as an httpx timeout (anyio turns the cancellation inside
        # its deadline scope into TimeoutError), so what we stopped is cancelled whatever it raised.
        if stopped or stream_task.cancelled():
            if not stream_task.cancelled():
                stream_task.exception()
            return "cancelled"
        stream_task.result()
        return "completed"

    async def _consume(
        self,
        graph: CompiledStateGraph,
        seed: list[BaseMessage],
        config: dict[str, Any],
        context: AttemptRuntime,
    ) -> None:
        handle, emit = self.transcript.handle, self.emit
        async for mode, data in graph.astream(
            {"messages": seed}, config, context=context, stream_mode=STREAM_MODES, durability="exit"
        ):
            for event in handle(mode, data):
                emit(event)

    async def _close_thread(
        self,
        graph: CompiledStateGraph,
        config: dict[str, Any],
        plan: AttemptPlan,
        turn: TurnContext,
        ending: str,
    ) -> tuple[list[BaseMessage], tuple[str, ...]]:
        """The attempt's authoritative state; the thread is deleted whatever happens."""
        saver = self.setup.checkpointer
        thread_id = config["configurable"]["thread_id"]
        messages, pending, checkpoints = plan.seed, (), -1
        try:
            snapshot = await graph.aget_state(config)
            if snapshot.values.get("messages"):
                messages = list(snapshot.values["messages"])
            pending = tuple(snapshot.next)
            checkpoints = len([c async for c in saver.alist(config)])
        finally:
            await saver.adelete_thread(thread_id)
            # Listed across threads: asking for this thread by config would re-create it.
            deleted = not [
                c async for c in saver.alist(None) if c.config["configurable"]["thread_id"] == thread_id
            ]
            self._log_persistence(plan, turn, ending, messages, checkpoints, deleted)
        return messages, pending

    def _log_persistence(
        self,
        plan: AttemptPlan,
        turn: TurnContext,
        ending: str,
        messages: list[BaseMessage],
        checkpoints: int,
        deleted: bool,
    ) -> None:
        sanitized = sanitize_tool_pairs(without_step_limit_reply(messages))
        logger.info(
            "[Persistence] turn=%s attempt=%s path=%s ending=%s chain=%d summary=%s tool_pairs=%d "
            "checkpoints=%d deleted=%s",
            turn.turn_id,
            plan.number,
            plan.reason,
            ending,
            len(serialize_chain(turn.produced(sanitized))),
            any(is_summary(m) for m in messages),
            tool_pair_count(sanitized),
            checkpoints,
            deleted,
        )

    # -- endings ---------------------------------------------------------------------------

    def _termination_reason(self, outcome: AttemptOutcome) -> TerminationReason:
        if outcome.ending == "completed" and has_unexecuted_tool_calls(outcome.messages):
            # e.g. a provider that ignores tool_choice="none" in the recovery reply
            return "completed_with_unexecuted_tool_calls"
        if outcome.plan.reason == "tool_limit_recovery" and outcome.ending in ("completed", "step_limit"):
            return "tool_limit_recovery"
        if outcome.ending == "completed":
            return "normal_completion"
        reasons: dict[Ending, TerminationReason] = {
            "truncated": "truncation_retry_exhausted",
            "refused": "context_refused",
            "provider_error": "provider_error",
            "cancelled": "cancelled",
            "step_limit": "tool_limit_recovery",
        }
        return reasons[outcome.ending]

    def _finish(self, outcome: AttemptOutcome, turn: TurnContext) -> None:
        reason = self._termination_reason(outcome)
        final = finalize_turn(outcome.messages, turn, self.guards, reason)
        for event in self.transcript.settle(final.live_messages):
            self.emit(event)
        if outcome.refusal is not None:
            self.transcript.add_text(outcome.refusal.message)
        result = TurnResult(
            value=self.transcript.text,
            blocks=self.transcript.blocks,
            messages_chain=final.messages_chain,
            context_metrics=self.guards[-1].final_metrics(final.live_messages),
            context_compactions=[record for guard in self.guards for record in guard.compactions],
            termination_reason=final.termination_reason,
            usage=self.transcript.usage,
            ttft_ms=self.transcript.ttft_ms,
            overflow_errors=self._overflows,
        )
        self._terminate(self._terminal_event(outcome, result))

    def _terminal_event(self, outcome: AttemptOutcome, result: TurnResult) -> TurnEvent:
        partial = result.value
        if outcome.ending == "cancelled":
            return TurnCancelled(partial=partial, result=result)
        if outcome.refusal is not None:
            return TurnFailed(
                code="context_refused", message=outcome.refusal.message, partial=partial, result=result
            )
        if outcome.failure is not None:
            return TurnFailed(
                code=outcome.failure.code, message=outcome.failure.message, partial=partial, result=result
            )
        if outcome.ending == "truncated":
            return TurnFailed(
                code="truncation_retry_exhausted",
                message=(
                    "The model's tool call was cut off at its output limit on every attempt "
                    f"({outcome.plan.truncation_retries + 1})."
                ),
                partial=partial,
                result=result,
            )
        return TurnCompleted(result=result)

    def _fail_without_chain(self, code: str, message: str) -> None:
        """A failure before or outside the graph: no chain, the visible text kept."""
        for event in self.transcript.settle([]):
            self.emit(event)
        result = TurnResult(
            value=self.transcript.text,
            blocks=self.transcript.blocks,
            termination_reason="internal_error",
            usage=self.transcript.usage,
            ttft_ms=self.transcript.ttft_ms,
        )
        self._terminate(TurnFailed(code=code, message=message, partial=result.value, result=result))

    def _terminate(self, event: TurnEvent) -> None:
        self.emit(event)
        self._terminated = True


def _ends_waiting_for_tools(messages: Sequence[BaseMessage]) -> bool:
    """Whether the state ends with a model reply whose tool calls never ran."""
    last = messages[-1] if messages else None
    return isinstance(last, AIMessage) and (bool(last.tool_calls) or is_step_limit_reply(last))
