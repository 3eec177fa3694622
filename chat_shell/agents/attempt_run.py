"""One attempt of a turn on its own thread (SPEC 5.5): the guard it runs with, the graph stream
read under the turn's cancel watch, and how the attempt ended.

Every attempt runs on its own `thread_id` with `durability="exit"`; whatever way it ends its
authoritative state is read and the thread deleted (`chat_shell.agents.threads`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_stream_writer
from langgraph.errors import GraphRecursionError
from langgraph.types import StreamMode

from chat_shell.agents.attempt_guidance import AttemptGuidance
from chat_shell.agents.attempts import AttemptOutcome, AttemptPlan, Ending
from chat_shell.agents.builder import AttemptRuntime, ToolCallTruncated, recursion_limit
from chat_shell.agents.cancel_watch import CancelWatch
from chat_shell.agents.finalizer import is_step_limit_reply
from chat_shell.agents.graph_events import GraphEvents
from chat_shell.agents.threads import close_thread
from chat_shell.agents.turn_context import TurnContext
from chat_shell.agents.turn_setup import TurnSetup
from chat_shell.contracts import ModelRequest, TurnEvent, TurnRequest
from chat_shell.guard.composition import chain_pre_model_hooks
from chat_shell.guard.protocol import ContextRefused, TurnGuard
from chat_shell.guard.request_record import describe_request
from chat_shell.providers.errors import classify_provider_error
from chat_shell.tasks import running
from chat_shell.tools.approvals import TurnApprovals
from chat_shell.tools.registry import AttemptTools, ToolSet
from chat_shell.tools.turn_tools import TurnTools

logger = logging.getLogger("chat_shell.runtime")

STREAM_MODES: list[StreamMode] = ["messages", "updates", "custom"]
Hook = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass
class AttemptRun:
    """One attempt. Its guard joins the turn's `guards` and each model call's request its
    `requests` as they happen; `outcome` is set when the attempt ends (not when it is abandoned)."""

    setup: TurnSetup
    request: TurnRequest
    cancel: asyncio.Event
    graph_events: GraphEvents
    turn_tools: TurnTools
    approvals: TurnApprovals
    # The turn's MCP tools, fixed at its start for all its attempts.
    mcp_tools: ToolSet | None
    guards: list[TurnGuard]
    requests: list[ModelRequest]
    outcome: AttemptOutcome | None = None
    # The provider refused the request as over its context window.
    overflowed: bool = False

    async def events(self, plan: AttemptPlan, turn: TurnContext) -> AsyncGenerator[TurnEvent, None]:
        """The attempt's events; its outcome is left in `outcome`."""
        setup = self.setup
        # Decided again before each model call, on the view the guard sends; the MCP tools are
        # the turn's.
        offered = setup.guard.offered(self.mcp_tools)
        guard = setup.guard_factory(
            setup.guard.context(
                conversation_id=self.request.conversation_id,
                turn_id=self.request.turn_id,
                tools=offered,
                emit=_emit_from_graph,
                original_input_ids=turn.original_input_ids,
                force_compaction=plan.force_compaction,
                assistant_message_id=self.request.assistant_message_id,
                guidance=plan.guidance,
            )
        )
        self.guards.append(guard)
        graph = setup.graphs(setup.guard.profile, answer_only=plan.answer_only)
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
            turn_tools=self.turn_tools,
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
            with running(watch.watch()):
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
                failure = failure.of_model(setup.guard.profile.name)
                self.overflowed = failure.code == "context_overflow"
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
            messages, pending = await close_thread(
                setup.checkpointer, graph, config, plan, turn, ending or interrupted
            )
        if ending == "step_limit" and not pending and not _ends_waiting_for_tools(messages):
            # LangGraph checks its step budget before it notices the graph has finished.
            ending = "completed"
        if ending == "completed" and messages and is_step_limit_reply(messages[-1]):
            ending = "step_limit"
        self.outcome = AttemptOutcome(plan, ending, messages, failure, refusal)

    def _recorded(self, hook: Hook, plan: AttemptPlan, tools: AttemptTools) -> Hook:
        """`hook`, keeping the request each model call is sent: its output and the tools bound."""

        async def record(state: dict[str, Any]) -> dict[str, Any]:
            update = await hook(state)
            sent, counter = update["llm_input_messages"], self.setup.guard.counter
            instructions = self.request.instructions
            self.requests.append(
                describe_request(sent, tools.current, counter, attempt=plan.number, instructions=instructions)
            )
            return update

        return record


def _emit_from_graph(event: TurnEvent) -> None:
    """The guard's sink: from inside a graph node the event joins the graph's ordered stream
    (LangGraph's `custom` mode), in order with the model's tokens and the tool events."""
    get_stream_writer()(event)


def _ends_waiting_for_tools(messages: Sequence[BaseMessage]) -> bool:
    """Whether the state ends with a model reply whose tool calls never ran."""
    last = messages[-1] if messages else None
    return isinstance(last, AIMessage) and (bool(last.tool_calls) or is_step_limit_reply(last))
