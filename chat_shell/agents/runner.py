"""One turn: attempts on fresh threads, streaming, endings, and the finalizer (SPEC 5.5).

Every attempt runs on its own `thread_id` with `durability="exit"`; whatever way it ends
(normally, by an exception, by cancellation) its authoritative state is read with
`aget_state`, the thread is deleted, and one persistence line is logged. The turn then ends
through the one finalizer, and the caller gets exactly one terminal event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.config import get_stream_writer
from langgraph.errors import GraphRecursionError
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import StreamMode

from chat_shell.accounting.budget import Budget
from chat_shell.accounting.token_counter import TokenCounter
from chat_shell.agents.attempt_guidance import AttemptGuidance
from chat_shell.agents.attempts import (
    AttemptOutcome,
    AttemptPlan,
    Ending,
    next_attempt,
    refuse_repeated_overflow,
)
from chat_shell.agents.builder import AttemptRuntime, ToolCallTruncated, recursion_limit
from chat_shell.agents.cancel_watch import CancelWatch
from chat_shell.agents.endings import terminal_event, termination_reason
from chat_shell.agents.finalizer import (
    finalize_turn,
    is_step_limit_reply,
    without_step_limit_reply,
)
from chat_shell.agents.graph_events import GraphEvents
from chat_shell.agents.serializer import serialize_chain
from chat_shell.agents.turn_context import TurnContext
from chat_shell.contracts import (
    ChainMessage,
    ModelRequest,
    TurnEvent,
    TurnFailed,
    TurnRequest,
    TurnResult,
    TurnStarted,
)
from chat_shell.guard.composition import chain_pre_model_hooks
from chat_shell.guard.protocol import ContextRefused, GuardContext, GuardFactory, Summarizer, TurnGuard
from chat_shell.guard.request_record import describe_request
from chat_shell.guard.stages.summary_compaction.settings import CompactionSettings
from chat_shell.host import TurnServices
from chat_shell.messages.convert import initial_messages
from chat_shell.messages.markers import is_summary
from chat_shell.messages.tool_pairs import sanitize_tool_pairs, tool_pair_count
from chat_shell.providers.errors import classify_provider_error
from chat_shell.providers.profiles import ModelProfile
from chat_shell.tools.approvals import TurnApprovals
from chat_shell.tools.mcp import McpToolbox
from chat_shell.tools.registry import AttemptTools, ToolRegistry, ToolSet
from chat_shell.tools.turn_tools import TurnTools

logger = logging.getLogger("chat_shell.runtime")

STREAM_MODES: list[StreamMode] = ["messages", "updates", "custom"]
Hook = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class GraphSource(Protocol):
    def __call__(self, profile: ModelProfile, *, answer_only: bool) -> CompiledStateGraph: ...


@dataclass(frozen=True)
class TurnSetup:
    """What the runtime hands each turn (shared, read-only)."""

    profile: ModelProfile
    # The turn's budget and token counter (made once per turn, handed to guards and tools).
    budget: Budget
    counter: TokenCounter
    graphs: GraphSource
    checkpointer: BaseCheckpointSaver
    guard_factory: GuardFactory
    tools: ToolRegistry
    # The MCP servers (None: none configured); each turn uses those its conversation enabled.
    mcp: McpToolbox | None
    tool_call_limit: int
    truncation_retries: int
    system_prompt: str | None
    # What the host serves this turn (history, attachments, the user-visible record).
    services: TurnServices
    # Summary compaction's model call (None: the guard has no summary stage), and its settings.
    summarizer: Summarizer | None = None
    compaction: CompactionSettings = field(default_factory=CompactionSettings)


class _HistoryUnavailable(Exception):
    pass


class TurnExecution:
    """One turn. `events()` is the turn itself: an async generator over the graph streams of its
    attempts, iterated by the caller's task, so nothing runs between the graph and the caller."""

    def __init__(self, setup: TurnSetup, request: TurnRequest, cancel: asyncio.Event) -> None:
        self.setup = setup
        self.request = request
        self.cancel = cancel
        self.graph_events = GraphEvents()
        self.tools = TurnTools.for_turn(request, setup.budget, setup.counter.text, setup.services)
        self.guards: list[TurnGuard] = []
        # The turn's MCP tools, fixed at its start for all its attempts.
        self.mcp_tools: ToolSet | None = None
        self.approvals = TurnApprovals(request.ask_first)
        self.requests: list[ModelRequest] = []
        self._overflows = 0
        self._terminated = False
        self._outcome: AttemptOutcome | None = None

    # -- the turn --------------------------------------------------------------------------

    async def events(self) -> AsyncGenerator[TurnEvent, None]:
        """`turn.started` first, exactly one terminal event last; setting `cancel` ends the turn
        with `turn.cancelled`. A caller that stops iterating (`aclose`) stops the turn."""
        try:
            profile = self.setup.profile
            yield TurnStarted(model=profile.name, profile=profile.name)
            if self.setup.mcp is not None:
                self.mcp_tools = await self.setup.mcp.offer(self.request.mcp_servers)
            try:
                history = await self._history()
            except _HistoryUnavailable as exc:
                for event in self._fail_without_chain("history_unavailable", str(exc)):
                    yield event
                return
            turn, messages = TurnContext.start(
                self.request.turn_id, initial_messages(self.request, history, self.setup.system_prompt)
            )
            plan: AttemptPlan | None = AttemptPlan.first(messages)
            while plan is not None:
                async with contextlib.aclosing(self._attempt(plan, turn)) as attempt:
                    async for event in attempt:
                        yield event
                assert self._outcome is not None
                plan = next_attempt(self._outcome, max_truncation_retries=self.setup.truncation_retries)
            assert self._outcome is not None  # the first plan always runs, and every attempt ends with one
            outcome = refuse_repeated_overflow(
                self._outcome, model=profile.name, available_tokens=self.setup.budget.available_input
            )
            for event in self._finish(outcome, turn):
                yield event
        except Exception:
            logger.exception("turn %s failed inside chat_shell", self.request.turn_id)
            if not self._terminated:
                for event in self._fail_without_chain(
                    "internal_error", "The turn failed because of an internal error."
                ):
                    yield event

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

    async def _attempt(self, plan: AttemptPlan, turn: TurnContext) -> AsyncGenerator[TurnEvent, None]:
        """The attempt's events; its outcome is left in `_outcome`."""
        setup = self.setup
        # Decided again before each model call, on the view the guard sends; the MCP tools are
        # the turn's.
        offered = AttemptTools(
            setup.tools, can_browse_history=self.tools.history is not None, mcp=self.mcp_tools
        )
        guard = setup.guard_factory(
            GuardContext(
                profile=setup.profile,
                budget=setup.budget,
                counter=setup.counter,
                conversation_id=self.request.conversation_id,
                turn_id=self.request.turn_id,
                tools=offered.offer,
                emit=_emit_from_graph,
                original_input_ids=turn.original_input_ids,
                attachments=setup.services.attachments,
                force_compaction=plan.force_compaction,
                summarizer=setup.summarizer,
                compaction=setup.compaction,
                assistant_message_id=self.request.assistant_message_id,
                guidance=plan.guidance,
            )
        )
        self.guards.append(guard)
        graph = setup.graphs(setup.profile, answer_only=plan.answer_only)
        thread_id = turn.thread_id(plan.number)
        config: RunnableConfig = {
            "configurable": {"thread_id": thread_id},
            "recursion_limit": recursion_limit(setup.tool_call_limit),
        }
        context = AttemptRuntime(
            hook=self._recorded(chain_pre_model_hooks(guard, AttemptGuidance(plan.guidance)), plan, offered),
            conversation_id=self.request.conversation_id,
            owner_id=self.request.owner_id,
            tools=offered,
            turn_tools=self.tools,
            approvals=self.approvals,
        )
        ending: Ending | None = None
        failure = None
        refusal = None
        # How the persistence line names an attempt that ends without an outcome.
        interrupted = "internal_error"
        watch = CancelWatch(self.cancel)
        handle = self.graph_events.handle
        try:
            with watch:
                # create_react_agent types its graph without the context_schema (context: None).
                stream = graph.astream(  # type: ignore[call-overload]
                    {"messages": plan.seed},
                    config,
                    context=context,
                    stream_mode=STREAM_MODES,
                    durability="exit",
                )
                finished = False
                async with contextlib.aclosing(stream):
                    while not watch.requested:
                        try:
                            mode, data = await watch.next(stream)
                        except StopAsyncIteration:
                            finished = True
                            break
                        for event in handle(mode, data):
                            yield event
            # A stop that the graph swallowed still stopped it.
            ending = "completed" if finished and not watch.stopped() else "cancelled"
        except GeneratorExit:
            interrupted = "abandoned"  # the caller stopped listening
            raise
        except BaseException as exc:
            # A stopped read can surface as an httpx timeout (anyio turns the cancellation inside
            # its deadline scope into TimeoutError), so what the watch stopped is cancelled
            # whatever it raised.
            if watch.stopped():
                ending = "cancelled"
            elif isinstance(exc, asyncio.CancelledError):
                interrupted = "abandoned"  # the caller's task was cancelled
                raise
            elif isinstance(exc, GraphRecursionError):
                ending = "step_limit"
            elif isinstance(exc, ToolCallTruncated):
                ending = "truncated"
            elif isinstance(exc, ContextRefused):
                ending, refusal = "refused", exc
            elif isinstance(exc, Exception) and (failure := classify_provider_error(exc)) is not None:
                ending = "provider_error"
                failure = failure.of_model(setup.profile.name)
                self._overflows += failure.code == "context_overflow"
                logger.warning(
                    "turn %s attempt %s: provider failure %s: %r",
                    turn.turn_id,
                    plan.number,
                    failure.code,
                    exc,
                )
            else:
                raise
        finally:
            messages, pending = await self._close_thread(graph, config, plan, turn, ending or interrupted)
        if ending == "step_limit" and not pending and not _ends_waiting_for_tools(messages):
            # LangGraph checks its step budget before it notices the graph has finished.
            ending = "completed"
        if ending == "completed" and messages and is_step_limit_reply(messages[-1]):
            ending = "step_limit"
        self._outcome = AttemptOutcome(plan, ending, messages, failure, refusal)

    def _recorded(self, hook: Hook, plan: AttemptPlan, tools: AttemptTools) -> Hook:
        """`hook`, keeping the request each model call is sent: its output and the tools bound."""

        async def record(state: dict[str, Any]) -> dict[str, Any]:
            update = await hook(state)
            sent, counter = update["llm_input_messages"], self.setup.counter
            instructions = self.request.instructions
            self.requests.append(
                describe_request(sent, tools.current, counter, attempt=plan.number, instructions=instructions)
            )
            return update

        return record

    async def _close_thread(
        self,
        graph: CompiledStateGraph,
        config: RunnableConfig,
        plan: AttemptPlan,
        turn: TurnContext,
        ending: str,
    ) -> tuple[list[BaseMessage], tuple[str, ...]]:
        """The attempt's authoritative state; the thread is deleted whatever happens."""
        saver = self.setup.checkpointer
        thread_id = config["configurable"]["thread_id"]
        pending: tuple[str, ...]
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

    def _finish(self, outcome: AttemptOutcome, turn: TurnContext) -> list[TurnEvent]:
        """The settled tool results and the terminal event, through the one finalizer."""
        reason = termination_reason(outcome)
        final = finalize_turn(outcome.messages, turn, self.guards, reason)
        events = self.graph_events.settle(final.live_messages)
        result = TurnResult(
            value=self.graph_events.text,
            blocks=self.graph_events.blocks,
            messages_chain=final.messages_chain,
            context_metrics=self.guards[-1].final_metrics(final.live_messages),
            context_compactions=[record for guard in self.guards for record in guard.compactions],
            termination_reason=final.termination_reason,
            usage=self.graph_events.usage,
            ttft_ms=self.graph_events.ttft_ms,
            overflow_errors=self._overflows,
            attempts=len(self.guards),
            requests=self.requests,
        )
        return [*events, self._terminal(terminal_event(outcome, result))]

    def _fail_without_chain(self, code: str, message: str) -> list[TurnEvent]:
        """A failure before or outside the graph: no chain, what the user saw kept."""
        events = self.graph_events.settle([])
        result = TurnResult(
            value=self.graph_events.text,
            blocks=self.graph_events.blocks,
            termination_reason="internal_error",
            usage=self.graph_events.usage,
            ttft_ms=self.graph_events.ttft_ms,
            attempts=len(self.guards),
            requests=self.requests,
        )
        failed = TurnFailed(code=code, message=message, partial=result.value, result=result)
        return [*events, self._terminal(failed)]

    def _terminal(self, event: TurnEvent) -> TurnEvent:
        if self._terminated:
            raise RuntimeError(f"a second terminal event ({event.type})")
        self._terminated = True
        self.graph_events.visible.add(event)
        return event


def _emit_from_graph(event: TurnEvent) -> None:
    """The guard's sink: from inside a graph node the event joins the graph's ordered stream
    (LangGraph's `custom` mode), in order with the model's tokens and the tool events."""
    get_stream_writer()(event)


def _ends_waiting_for_tools(messages: Sequence[BaseMessage]) -> bool:
    """Whether the state ends with a model reply whose tool calls never ran."""
    last = messages[-1] if messages else None
    return isinstance(last, AIMessage) and (bool(last.tool_calls) or is_step_limit_reply(last))
