"""What the user sees of a turn: graph stream items in, `TurnEvent`s and result blocks out.

Only token chunks of the answering model node (`agent`) become text; whatever hooks write
(compaction summaries, retained clones, `llm_input_messages`) also appears in LangGraph's
message stream under other node names and is ignored here. A tool result is announced once
the next pre-model hook has run, because only then is it known whether the model sees it
compacted (`truncated_for_model`); the result's blocks are settled against the final state.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessageChunk, BaseMessage, RemoveMessage, ToolMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from chat_shell.contracts import (
    Block,
    MessageDelta,
    TextBlock,
    ToolBlock,
    ToolCompleted,
    ToolStarted,
    TurnEvent,
    Usage,
)
from chat_shell.messages.convert import tool_output_text
from chat_shell.messages.markers import is_compacted

ANSWERING_NODE = "agent"
_NO_EVENTS: tuple[TurnEvent, ...] = ()


def _chunk_text(chunk: AIMessageChunk) -> str:
    content = chunk.content
    if isinstance(content, str):
        return content
    return "".join(
        block.get("text", "") for block in content if isinstance(block, dict) and block.get("type") == "text"
    )


class TurnTranscript:
    def __init__(self) -> None:
        self._started = time.perf_counter()
        # Text segments (lists of pieces, joined once at the end) and tool blocks, in order.
        self._segments: list[list[str] | ToolBlock] = []
        self._tools: dict[str, ToolBlock] = {}
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
            return self._on_custom(data)
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
        last = self._segments[-1] if self._segments else None
        if isinstance(last, list):
            last.append(piece)
        else:
            self._segments.append([piece])
        return (MessageDelta(text=piece),)

    def _on_custom(self, event: Any) -> Sequence[TurnEvent]:
        if isinstance(event, ToolStarted):
            block = ToolBlock(call_id=event.call_id, name=event.name, args=event.args)
            self._tools[event.call_id] = block
            self._segments.append(block)
        return (event,)

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
                if isinstance(message, ToolMessage) and message.tool_call_id in self._tools:
                    self._record_result(message)
        return events

    def _record_result(self, message: ToolMessage) -> None:
        block = self._tools[message.tool_call_id]
        if block.status != "running":
            return
        block.output = tool_output_text(message.content)
        block.status = "error" if message.status == "error" else "completed"
        self._pending[message.tool_call_id] = message

    def _announce_pending(self, hook_writes: Sequence[BaseMessage]) -> list[TurnEvent]:
        """Tool results the guard has now seen: compacted in place, summarized away, or as is."""
        if not self._pending:
            return []
        rewritten = {m.tool_call_id: m for m in hook_writes if isinstance(m, ToolMessage)}
        removed_all = any(isinstance(m, RemoveMessage) and m.id == REMOVE_ALL_MESSAGES for m in hook_writes)
        events: list[TurnEvent] = []
        for call_id in list(self._pending):
            visible = rewritten.get(call_id)
            truncated = is_compacted(visible) if visible is not None else removed_all
            events.append(self._complete(call_id, truncated))
        return events

    def _complete(self, call_id: str, truncated: bool) -> ToolCompleted:
        self._pending.pop(call_id, None)
        block = self._tools[call_id]
        block.truncated_for_model = truncated
        return ToolCompleted(
            call_id=call_id,
            name=block.name,
            output=block.output or "",
            is_error=block.status == "error",
            truncated_for_model=truncated,
        )

    # -- end of turn -----------------------------------------------------------------------

    def settle(self, final_state: Sequence[BaseMessage]) -> list[TurnEvent]:
        """Announce results still pending and mark each block by the final model-visible state."""
        visible = {m.tool_call_id: m for m in final_state if isinstance(m, ToolMessage)}
        events: list[TurnEvent] = []
        for call_id in list(self._pending):
            message = visible.get(call_id)
            events.append(self._complete(call_id, is_compacted(message) if message is not None else True))
        for call_id, block in self._tools.items():
            if block.status == "running":
                # Stopped before the tool returned (cancel, failure, step limit).
                block.status = "error"
                continue
            message = visible.get(call_id)
            block.truncated_for_model = is_compacted(message) if message is not None else True
        return events

    def add_text(self, text: str) -> None:
        """Text the user is shown that no model wrote (a refusal); never a `message.delta`."""
        self._segments.append([text])

    @property
    def text(self) -> str:
        """The assistant's visible text: its text blocks, separated as the UI shows them."""
        return "\n\n".join(block.text for block in self.blocks if isinstance(block, TextBlock))

    @property
    def blocks(self) -> list[Block]:
        return [
            TextBlock(text="".join(segment)) if isinstance(segment, list) else segment
            for segment in self._segments
        ]

    @property
    def usage(self) -> Usage:
        return Usage(
            input_tokens=self._input_tokens,
            output_tokens=self._output_tokens,
            model_calls=self._model_calls,
            provider_reported=self._calls_without_usage == 0,
        )
