"""The tool set of a runtime: OpenAI-style function tools (LangChain tools), by unique name.

Adding a tool is one `register` call (or a `ToolRegistry([...])`). A tool registered with
`offered_when` is offered to the model only in turns whose `TurnFacts` satisfy it (e.g. the
history tools once the history holds a checkpoint); every other tool is always offered. The
runtime asks `offered(facts)` once per attempt: the answer is cached per set of names, so the
per-attempt cost is evaluating the predicates. Tools read what they act on (conversation,
readers, budgets) from the attempt's run context, never from the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from chat_shell.tools.history_tools import list_history_tool, read_message_tool
from chat_shell.tools.read_attachment import read_attachment_tool
from chat_shell.tools.report import generate_report


@dataclass(frozen=True)
class TurnFacts:
    """What decides which optional tools an attempt offers."""

    # The model-visible history holds a summary checkpoint (earlier turns were summarized).
    has_checkpoint: bool = False
    # The host can serve the user-visible record (`list_history`, `read_message`).
    can_browse_history: bool = False
    # Some message the model sees references an attachment (`read_attachment`).
    has_attachments: bool = False


OfferCondition = Callable[[TurnFacts], bool]


@dataclass(frozen=True)
class ToolSet:
    """The tools bound to the model for one attempt, with their schemas (the guard counts them)."""

    tools: tuple[BaseTool, ...]
    schemas: tuple[dict[str, Any], ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(tool.name for tool in self.tools)


class ToolRegistry:
    def __init__(self, tools: Iterable[BaseTool] = ()) -> None:
        self._tools: dict[str, BaseTool] = {}
        self._conditions: dict[str, OfferCondition] = {}
        self._sets: dict[tuple[str, ...], ToolSet] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: BaseTool, *, offered_when: OfferCondition | None = None) -> None:
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        if offered_when is not None:
            self._conditions[tool.name] = offered_when
        self._sets.clear()

    @property
    def tools(self) -> list[BaseTool]:
        """Every registered tool (what the agent's tool node can run)."""
        return list(self._tools.values())

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        """The function schemas of every registered tool."""
        return [convert_to_openai_tool(tool) for tool in self._tools.values()]

    def offered(self, facts: TurnFacts) -> ToolSet:
        """The tools offered under `facts`, in registration order."""
        names = tuple(
            name
            for name in self._tools
            if (condition := self._conditions.get(name)) is None or condition(facts)
        )
        found = self._sets.get(names)
        if found is None:
            tools = tuple(self._tools[name] for name in names)
            found = ToolSet(tools, tuple(convert_to_openai_tool(tool) for tool in tools))
            self._sets[names] = found
        return found


def tool_error_message(error: Exception) -> str:
    """What the model sees when a tool raises: the error, and that it may try again."""
    return (
        f"Error: the tool failed with {type(error).__name__}: {error}. "
        "Check the arguments and try again, or answer without this tool."
    )


def _attachments_in_view(facts: TurnFacts) -> bool:
    return facts.has_attachments


def _history_is_summarized(facts: TurnFacts) -> bool:
    return facts.has_checkpoint and facts.can_browse_history


def default_tools() -> ToolRegistry:
    """The built-in tools every runtime starts with."""
    registry = ToolRegistry([generate_report])
    registry.register(read_attachment_tool, offered_when=_attachments_in_view)
    registry.register(list_history_tool(), offered_when=_history_is_summarized)
    registry.register(read_message_tool(), offered_when=_history_is_summarized)
    return registry
