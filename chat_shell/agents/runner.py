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
from collections.abc import AsyncGenerator

from chat_shell.agents.attempt_run import AttemptRun
from chat_shell.agents.attempts import (
    AttemptOutcome,
    AttemptPlan,
    next_attempt,
    refuse_repeated_overflow,
)
from chat_shell.agents.endings import terminal_event, termination_reason
from chat_shell.agents.finalizer import (
    finalize_turn,
)
from chat_shell.agents.graph_events import GraphEvents
from chat_shell.agents.turn_context import TurnContext
from chat_shell.agents.turn_setup import TurnSetup
from chat_shell.contracts import (
    ChainMessage,
    ModelRequest,
    TurnEvent,
    TurnFailed,
    TurnRequest,
    TurnResult,
    TurnStarted,
)
from chat_shell.guard.protocol import TurnGuard
from chat_shell.messages.convert import initial_messages
from chat_shell.tools.approvals import TurnApprovals
from chat_shell.tools.registry import ToolSet
from chat_shell.tools.turn_tools import TurnTools

logger = logging.getLogger("chat_shell.runtime")


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
        self.tools = TurnTools.for_turn(
            request, setup.guard.budget, setup.guard.counter.text, setup.guard.services
        )
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
            profile = self.setup.guard.profile
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
                run = AttemptRun(
                    self.setup,
                    self.request,
                    self.cancel,
                    self.graph_events,
                    self.tools,
                    self.approvals,
                    self.mcp_tools,
                    self.guards,
                    self.requests,
                )
                async with contextlib.aclosing(run.events(plan, turn)) as attempt:
                    async for event in attempt:
                        yield event
                assert run.outcome is not None
                self._outcome = run.outcome
                self._overflows += run.overflowed
                plan = next_attempt(self._outcome, max_truncation_retries=self.setup.truncation_retries)
            assert self._outcome is not None  # the first plan always runs, and every attempt ends with one
            outcome = refuse_repeated_overflow(
                self._outcome, model=profile.name, available_tokens=self.setup.guard.budget.available_input
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
        loader = self.setup.guard.services.history
        if loader is None:
            raise _HistoryUnavailable("The request carries no history and no history loader is configured.")
        try:
            return await loader.load(self.request.conversation_id, self.request.user.message_id)
        except Exception as exc:
            logger.warning("history load failed for conversation %s: %r", self.request.conversation_id, exc)
            raise _HistoryUnavailable("The conversation history could not be loaded.") from exc

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
