"""What the user saw of a turn: the one fold of its events into text and blocks, and its inverse.

Every place that needs "the text and blocks the user saw" folds the turn's events here: the
runtime while it streams, the service client when a stream breaks, the backend's relay when a
turn fails outside the runtime, orphan recovery over the stored log, and the replay of a turn
whose log was pruned (which runs the inverse, `replay`). So a stopped, interrupted, failed or
replayed turn stores and shows exactly what the stream delivered.

The rules, in one place:
- A text block is the concatenation of the `message.delta` texts since the last tool block; the
  turn's text is the concatenation of every delta, in order. Nothing is inserted between blocks
  here: a producer that wants paragraphs between model rounds puts the break into the delta
  (`opening`), so what streamed and what is stored are the same characters.
- A tool block opens with `tool.started` and takes its output and status from `tool.completed`.
  A tool still running when the turn ends (stopped, failed, interrupted) ends as `error`.
- An "ask first" call's block is `pending` from `approval.requested` until `approval.decided`
  marks it `allowed` or `denied`.
- Other events (metrics, compaction, `turn.started`) show no text and leave the blocks alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from chat_shell.contracts import (
    TERMINAL_EVENT_TYPES,
    ApprovalDecided,
    ApprovalRequested,
    Block,
    MessageDelta,
    TextBlock,
    ToolBlock,
    ToolCompleted,
    ToolStarted,
    TurnEvent,
)

# Between the text of two model rounds (a text block after a tool block), so the turn's text
# reads as paragraphs wherever it is shown as one string (copy, export, model history).
PARAGRAPH_BREAK = "\n\n"

VisibleEvent = MessageDelta | ToolStarted | ToolCompleted | ApprovalRequested | ApprovalDecided
# The event types that change what the user sees; the stored log's other rows need no parsing.
VISIBLE_EVENT_TYPES = frozenset(
    {"message.delta", "tool.started", "tool.completed", "approval.requested", "approval.decided"}
)


class VisibleTurn:
    """The text and blocks of one turn, built event by event."""

    def __init__(self) -> None:
        self._blocks: list[TextBlock | ToolBlock] = []
        self._pieces: list[str] = []  # of the open text block, joined when it is read
        self._tools: dict[str, ToolBlock] = {}
        self._has_text = False

    def add(self, event: TurnEvent) -> None:
        match event:
            case MessageDelta():
                self._add_text(event.text)
            case ToolStarted():
                self._close_text()
                block = ToolBlock(call_id=event.call_id, name=event.name, args=dict(event.args))
                self._tools[event.call_id] = block
                self._blocks.append(block)
            case ToolCompleted():
                tool = self._tools.get(event.call_id)
                if tool is None:  # a result whose start was not seen: shown as a block of its own
                    self._close_text()
                    tool = self._tools[event.call_id] = ToolBlock(call_id=event.call_id, name=event.name)
                    self._blocks.append(tool)
                tool.output = event.output
                tool.status = "error" if event.is_error else "completed"
                tool.truncated_for_model = event.truncated_for_model
            case ApprovalRequested():
                if (asked := self._tools.get(event.call_id)) is not None:
                    asked.approval = "pending"
            case ApprovalDecided():
                if (asked := self._tools.get(event.call_id)) is not None:
                    asked.approval = "allowed" if event.allowed else "denied"
            case _ if event.type in TERMINAL_EVENT_TYPES:
                self.end()

    def end(self) -> None:
        """The turn is over: a tool that never returned was stopped."""
        self._close_text()
        for block in self._tools.values():
            if block.status == "running":
                block.status = "error"

    def opening(self, text: str) -> str:
        """`text` as the next delta: with a paragraph break when it opens a text block after a
        tool block and earlier text, so the turn's text keeps the rounds apart."""
        after_tool = not self._pieces and bool(self._blocks) and isinstance(self._blocks[-1], ToolBlock)
        return PARAGRAPH_BREAK + text if after_tool and self._has_text else text

    def tool(self, call_id: str) -> ToolBlock | None:
        return self._tools.get(call_id)

    @property
    def blocks(self) -> list[Block]:
        self._close_text()
        return list(self._blocks)

    @property
    def text(self) -> str:
        """Every delta of the turn, concatenated."""
        return "".join(block.text for block in self.blocks if isinstance(block, TextBlock))

    def _add_text(self, text: str) -> None:
        if not text:
            return
        if not self._pieces and self._blocks and isinstance(last := self._blocks[-1], TextBlock):
            # More text after the open block was read: extend it rather than start another.
            self._blocks.pop()
            self._pieces.append(last.text)
        self._pieces.append(text)
        self._has_text = True

    def _close_text(self) -> None:
        if self._pieces:
            self._blocks.append(TextBlock(text="".join(self._pieces)))
            self._pieces = []


def fold(events: Iterable[TurnEvent]) -> VisibleTurn:
    turn = VisibleTurn()
    for event in events:
        turn.add(event)
    return turn


def replay(blocks: Sequence[Block]) -> list[VisibleEvent]:
    """Events that fold back into `blocks`, followed by the turn's terminal event (the replay of
    a turn whose log was pruned)."""
    events: list[VisibleEvent] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            if block.text:
                events.append(MessageDelta(text=block.text))
            continue
        events.append(ToolStarted(call_id=block.call_id, name=block.name, args=dict(block.args)))
        if block.approval is not None:
            events.append(ApprovalRequested(call_id=block.call_id, name=block.name, args=dict(block.args)))
            if block.approval != "pending":
                events.append(ApprovalDecided(call_id=block.call_id, allowed=block.approval == "allowed"))
        # A tool stopped before it returned has no output: the turn's end marks it again.
        if block.output is not None:
            events.append(
                ToolCompleted(
                    call_id=block.call_id,
                    name=block.name,
                    output=block.output or "",
                    is_error=block.status == "error",
                    truncated_for_model=block.truncated_for_model,
                )
            )
    return events
