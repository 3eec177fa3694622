"""Guidance for one attempt, appended to the model input only.

It never enters graph state, so it is never summarized, checkpointed or persisted in the chain;
it runs after the guard, so a compaction in the retry cannot trim it away. The guard counts it
in the request it budgets (`GuardContext.guidance`).
"""

from __future__ import annotations

from typing import Any

from chat_shell.guard.composition import model_input
from chat_shell.guard.protocol import guidance_message


def truncation_guidance(attempt: int, limit: int) -> str:
    return (
        "Your previous response was cut off at the output token limit while writing a tool call, "
        "so the call was not executed. Use shorter arguments, or split the work into several "
        f"smaller tool calls. (Retry {attempt} of {limit}.)"
    )


TOOL_LIMIT_GUIDANCE = (
    "The tool-call limit for this turn has been reached. Do not call any more tools: answer the "
    "user now with what you have found so far, and say briefly what is still missing."
)


class AttemptGuidance:
    """The hook after the guard: appends `text` to the model input of the attempt's first call.

    Later calls of the same attempt come after the model has answered it; repeating the note
    there would describe a failure that is already behind.
    """

    def __init__(self, text: str | None) -> None:
        self._pending = text

    def __call__(self, state: dict[str, Any]) -> dict[str, Any]:
        if not self._pending:
            return {}
        guidance, self._pending = guidance_message(self._pending), None
        return {"llm_input_messages": [*model_input(state), guidance]}
