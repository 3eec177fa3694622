"""The refusal (SPEC 5.2.5): a request that still cannot fit is never sent; the user is told
what is too large and by how much."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from chat_shell.accounting.budget import Budget
from chat_shell.accounting.calibration import Estimate
from chat_shell.accounting.view import ContextView
from chat_shell.guard.metrics_tracker import attribute
from chat_shell.guard.protocol import ContextRefused
from chat_shell.messages.convert import INSTRUCTIONS_ID


class Refusal:
    def __init__(
        self, model: str, budget: Budget, view: ContextView, local_parts: Callable[[], Mapping[str, int]]
    ) -> None:
        self._model = model
        self._budget = budget
        self._view = view
        self._local_parts = local_parts

    def oversized_user(self) -> int | None:
        """The tokens of the latest user message when it alone exceeds the available input."""
        view = self._view
        if view.latest_human is None or view.tokens[view.latest_human] <= self._budget.available_input:
            return None
        return view.tokens[view.latest_human]

    def too_many_tools(self, schema_tokens: int) -> ContextRefused | None:
        """The refusal of a tool selection whose schemas alone take more than their share."""
        limit, model = self._budget.tool_schemas_limit, self._model
        if schema_tokens <= limit:
            return None
        return ContextRefused(
            f"The tools enabled in this conversation take about {schema_tokens:,} tokens just to "
            f"describe, more than the {limit:,} tokens (a quarter of {model}'s input) tools may use. "
            "Enable fewer MCP servers for this conversation in the tools panel.",
            needed_tokens=schema_tokens,
            available_tokens=limit,
        )

    def instructions_tokens(self) -> int | None:
        """The tokens of the system message when it carries the conversation's instructions."""
        view = self._view
        for index, message in enumerate(view.state):
            if message.id == INSTRUCTIONS_ID:
                return view.tokens[index]
        return None

    def check(self, current: Estimate) -> ContextRefused | None:
        """The refusal of the request the view would send now, or None when it fits."""
        available, model = self._budget.available_input, self._model
        oversized = self.oversized_user()
        if oversized is not None:
            return ContextRefused(
                f"Your message is about {oversized:,} tokens, but {model} accepts at most {available:,} "
                f"input tokens, so it is {oversized - available:,} tokens too long. Shorten it or split it "
                f"into several messages.",
                needed_tokens=oversized,
                available_tokens=available,
            )
        needed = current.effective
        if needed <= available:
            return None
        parts = attribute(self._local_parts(), effective=needed, fixed_overhead=current.fixed_overhead)
        largest = sorted(((n, s) for s, n in parts.items() if n), reverse=True)[:3]
        instructions = self.instructions_tokens()
        if instructions is not None and largest and largest[0][1] == "system":
            return ContextRefused(
                f"This conversation's instructions are about {instructions:,} tokens, and with them "
                f"the request needs about {needed:,} input tokens, but {model} accepts at most "
                f"{available:,}: {needed - available:,} tokens too many even after compaction. "
                "Shorten the conversation's instructions.",
                needed_tokens=needed,
                available_tokens=available,
            )
        listing = ", ".join(f"{s.replace('_', ' ')} {n:,}" for n, s in largest)
        return ContextRefused(
            f"This request needs about {needed:,} input tokens, but {model} accepts at most "
            f"{available:,}: {needed - available:,} tokens too many even after compaction. "
            f"Largest parts (tokens): {listing}. Start a new conversation or ask for less at once.",
            needed_tokens=needed,
            available_tokens=available,
        )
