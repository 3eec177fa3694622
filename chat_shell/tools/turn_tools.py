"""The per-turn state of the built-in tools.

A compiled graph serves every conversation (one per model), so no tool holds a conversation.
Each turn builds one `TurnTools`; it reaches the tools through the LangGraph run context
(`AttemptRuntime.tools`, read by a tool through its injected `runtime: ToolRuntime` argument).
All attempts of a turn share it, so per-turn call limits hold across retries. A built-in tool
that needs per-turn state adds its field here.
"""

from __future__ import annotations

from dataclasses import dataclass

from chat_shell.compression.budget import budget_for
from chat_shell.compression.token_counter import text_counter_for
from chat_shell.contracts import AttachmentReader
from chat_shell.messages.attachment_readers import NoAttachmentReader
from chat_shell.providers.profiles import ModelProfile
from chat_shell.tools import read_attachment


@dataclass(frozen=True)
class TurnTools:
    read_attachment: read_attachment.ReadAttachmentSession

    @classmethod
    def for_turn(
        cls, conversation_id: int, profile: ModelProfile, attachments: AttachmentReader | None
    ) -> TurnTools:
        # Pages are sized for the budget the guard applies to this tool's output (profile
        # overrides included) and counted in the guard's units, so the guard never cuts one.
        page_budget = budget_for(profile).tool_output_limit(read_attachment.TOOL_NAME)
        return cls(
            read_attachment=read_attachment.ReadAttachmentSession(
                conversation_id,
                attachments if attachments is not None else NoAttachmentReader(),
                page_budget,
                text_counter_for(profile).count,
            )
        )
