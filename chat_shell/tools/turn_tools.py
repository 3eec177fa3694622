"""The per-turn state of the built-in tools.

A compiled graph serves every conversation (one per model), so no tool holds a conversation.
Each turn builds one `TurnTools`; it reaches the tools through the LangGraph run context
(`AttemptRuntime.turn_tools`, read by a tool through its injected `runtime: ToolRuntime`
argument). All attempts of a turn share it, so per-turn call limits hold across retries. A
built-in tool that needs per-turn state adds its field here.
"""

from __future__ import annotations

from dataclasses import dataclass

from chat_shell.accounting.budget import Budget
from chat_shell.accounting.text_counter import TextCounter
from chat_shell.contracts import TurnRequest
from chat_shell.host import TurnServices
from chat_shell.messages.attachment_readers import NoAttachmentReader
from chat_shell.tools import read_attachment
from chat_shell.tools.history_tools import HistoryToolSession


@dataclass(frozen=True)
class TurnTools:
    read_attachment: read_attachment.ReadAttachmentSession
    # None when the host cannot serve the user-visible record.
    history: HistoryToolSession | None

    @classmethod
    def for_turn(
        cls, request: TurnRequest, budget: Budget, counter: TextCounter, services: TurnServices
    ) -> TurnTools:
        # Results are sized for the budget the guard applies to each tool's output (profile
        # overrides included) and counted in the guard's units, so the guard never cuts one.
        history = None
        if services.originals is not None:
            history = HistoryToolSession(
                conversation_id=request.conversation_id,
                before_message_id=request.user.message_id,
                browser=services.originals,
                budget_tokens=budget.tool_output_limit,
                counter=counter,
            )
        return cls(
            read_attachment=read_attachment.ReadAttachmentSession(
                request.conversation_id,
                services.attachments if services.attachments is not None else NoAttachmentReader(),
                budget.tool_output_limit(read_attachment.TOOL_NAME),
                counter,
            ),
            history=history,
        )
