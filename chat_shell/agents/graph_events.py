"""The turn's events from LangGraph's stream: graph stream items in, `TurnEvent`s out.

Only token chunks of the answering model node (`agent`) become text; whatever hooks write
(compaction summaries, retained clones, `llm_input_messages`) also appears in LangGraph's
message stream under other node names and is ignored here. A tool result is announced once
the next pre-model hook has run, because only then is it known whether the model sees it
compacted (`truncated_for_model`).

Every event produced here is folded into one `VisibleTurn` (the one definition of what the user
saw), so the result's text and blocks are the events that streamed; the end of the turn only
corrects the tool blocks against the final model-visible state (`settle`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessageChunk, BaseMessage, RemoveMessage, ToolMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from chat_shell.contracts import Block, MessageDelta, ToolBlock, ToolCompleted, TurnEvent, Usage
from chat_shell.events.fold import VisibleTurn
from chat_shell.messages.convert import tool_output_text
from chat_shell.messages.markers import is_compacted
from chat_shell.tools.mcp import CALL_RECORD_KEY

ANSWERING_NODE = "agent"
_NO_EVENTS: tuple[TurnEvent, ...] = ()


def _chunk_text(chunk: AIMessageChunk) -> str:
    content = chunk.content
    if isinstance(content, str):
        return content
    return "".join(
        block.get("text", "") for block in content if isinstance(block, dict) and block.get("type") == "text"
    )


class GraphEvents:
    def __init__(self) -> None:
        self._started = time.perf_counter()
        self.visible = VisibleTurn()
        # Tool results written to state and not announced yet, by call id.
        self._pending: dict[str, ToolMessage] = {}
        self.ttft_ms: float | None = None
        self._input_tokens = 0
        self._output_tokens = 0
        self._model_calls = 0
        self._calls_without_usage = 0
        self._usage_seen = False

    # -- stream items ----------------------------------------------------------------------

    def handle(self, mode: str, data: Any) -> Sequence[TurnEvent]:
        if mode == "messages":
            return self._on_message(*data)
        if mode == "updates":
            return self._on_updates(data)
        if mode == "custom":
            # Written by graph nodes (tool starts, the guard's metrics and compactions).
            self.visible.add(data)
            return (data,)
        return _NO_EVENTS

    def _on_message(self, chunk: BaseMessage, meta: dict[str, Any]) -> Sequence[TurnEvent]:
        if meta.get("langgraph_node") != ANSWERING_NODE or not isinstance(chunk, AIMessageChunk):
            return _NO_EVENTS
        if chunk.usage_metadata:
            self._input_tokens += chunk.usage_metadata.get("input_tokens", 0)
            self._output_tokens += chunk.usage_metadata.get("output_tokens", 0)
            self._usage_seen = True
        piece = _chunk_text(chunk)
        if not piece:
            return _NO_EVENTS
        if self.ttft_ms is None:
            self.ttft_ms = (time.perf_counter() - self._started) * 1000
        delta = MessageDelta(text=self.visible.opening(piece))
        self.visible.add(delta)
        return (delta,)

    def _on_updates(self, update: dict[str, Any]) -> Sequence[TurnEvent]:
        events: list[TurnEvent] = []
        for node, value in update.items():
            written = (value.get("messages") or []) if isinstance(value, dict) else []
            if node == ANSWERING_NODE:
                self._model_calls += 1
                if not self._usage_seen:
                    self._calls_without_usage += 1
                self._usage_seen = False
            elif node == "pre_model_hook":
                events.extend(self._announce_pending(written))
            for message in written:
                if isinstance(message, ToolMessage) and self._awaits_result(message.tool_call_id):
                    self._pending[message.tool_call_id] = message
        return events

    def _awaits_result(self, call_id: str) -> bool:
        """A started tool whose first result this is (later writes are compacted copies)."""
        block = self.visible.tool(call_id)
        return block is not None and block.status == "running" and call_id not in self._pending

    def _announce_pending(self, hook_writes: Sequence[BaseMessage]) -> list[TurnEvent]:
        """Tool results the guard has now seen: compacted in place, summarized away, or as is."""
        if not self._pending:
            return []
        rewritten = {m.tool_call_id: m for m in hook_writes if isinstance(m, ToolMessage)}
        removed_all = any(isinstance(m, RemoveMessage) and m.id == REMOVE_ALL_MESSAGES for m in hook_writes)
        events: list[TurnEvent] = []
        for call_id in list(self._pending):
            visible = rewritten.get(call_id)
            events.append(
                self._complete(call_id, is_compacted(visible) if visible is not None else removed_all)
            )
        return events

    def _complete(self, call_id: str, truncated: bool) -> ToolCompleted:
        message = self._pending.pop(call_id)
        block = self.visible.tool(call_id)
        assert block is not None
        measured = message.response_metadata.get(CALL_RECORD_KEY) or {}
        event = ToolCompleted(
            call_id=call_id,
            name=block.name,
            output=tool_output_text(message.content),
            is_error=message.status == "error",
            truncated_for_model=truncated,
            mcp_outcome=measured.get("outcome"),
            duration_ms=measured.get("duration_ms"),
        )
        self.visible.add(event)
        return event

    # -- end of turn -----------------------------------------------------------------------

    def settle(self, final_state: Sequence[BaseMessage]) -> list[TurnEvent]:
        """Announce results still pending, end the tools that never returned, and mark each
        tool block by whether the final model-visible state holds it compacted (or not at all)."""
        visible = {m.tool_call_id: m for m in final_state if isinstance(m, ToolMessage)}
        events: list[TurnEvent] = []
        for call_id in list(self._pending):
            message = visible.get(call_id)
            events.append(self._complete(call_id, is_compacted(message) if message is not None else True))
        returned = [
            b.call_id for b in self.visible.blocks if isinstance(b, ToolBlock) and b.status != "running"
        ]
        # The others were stopped before they returned (cancel, failure, step limit): errors.
        self.visible.end()
        for call_id in returned:
            block, message = self.visible.tool(call_id), visible.get(call_id)
            assert block is not None
            block.truncated_for_model = is_compacted(message) if message is not None else True
        return events

    @property
    def text(self) -> str:
        return self.visible.text

    @property
    def blocks(self) -> list[Block]:
        return self.visible.blocks

    @property
    def usage(self) -> Usage:
        return Usage(
            input_tokens=self._input_tokens,
            output_tokens=self._output_tokens,
            model_calls=self._model_calls,
            provider_reported=self._calls_without_usage == 0,
        )
