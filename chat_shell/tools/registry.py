"""The tool set of a runtime: OpenAI-style function tools (LangChain tools), by unique name.

Adding a tool is one `register` call (or a `ToolRegistry([...])`). A tool registered with
`offered_when` is offered to the model only in turns whose `TurnFacts` satisfy it (e.g. the
history tools once the view holds a checkpoint); every other tool is always offered. The
guard asks an attempt's `AttemptTools` before each model call, on the view as it will be sent
(after a compaction in that very call too), so a tool appears the moment its condition holds;
the turn's MCP tools (`chat_shell.tools.mcp`, fixed at its start) follow the built-ins in every
call. The answer is cached per set of names (and joined set), with its schemas' token count,
so the per-call cost is a scan of the view's markers.
Tools read what they act on (conversation, readers, budgets) from the attempt's run context,
never from the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from chat_shell.accounting.token_counter import TokenCounter
from chat_shell.messages.attachment_names import named_attachment_ids
from chat_shell.messages.markers import MARKER_KEY
from chat_shell.tools.history_tools import list_history_tool, read_message_tool
from chat_shell.tools.read_attachment import read_attachment_tool


@dataclass(frozen=True)
class TurnFacts:
    """What decides which optional tools an attempt offers."""

    # The model-visible history holds a summary checkpoint (earlier turns were summarized).
    has_checkpoint: bool = False
    # The host can serve the user-visible record (`list_history`, `read_message`).
    can_browse_history: bool = False
    # Some message the model sees references an attachment, or a summary names one by its id
    # (`read_attachment`).
    has_attachments: bool = False

    @classmethod
    def of_view(cls, messages: Sequence[BaseMessage], *, can_browse_history: bool) -> TurnFacts:
        """The facts of the messages the model is about to see (raw marker reads: no parsing)."""
        checkpoint = attachments = False
        for message in messages:
            raw = message.additional_kwargs.get(MARKER_KEY) or {}
            if raw.get("attachment_ids"):
                attachments = True
            if raw.get("summary_compacted"):
                checkpoint = True
                attachments = attachments or bool(named_attachment_ids(message.text))
        return cls(
            has_checkpoint=checkpoint, can_browse_history=can_browse_history, has_attachments=attachments
        )


OfferCondition = Callable[[TurnFacts], bool]


def tool_schema(tool: BaseTool) -> dict[str, Any]:
    """The function schema sent to the model for `tool` (and counted by the guard)."""
    return convert_to_openai_tool(tool)


@dataclass(frozen=True)
class ToolSet:
    """The tools bound to the model for one call, with their schemas (the guard counts them)."""

    tools: tuple[BaseTool, ...]
    schemas: tuple[dict[str, Any], ...]
    # Tells apart sets whose names match but whose schemas differ (a server changed a tool).
    revision: str = ""
    # The schemas' token count per counter encoding: a set reused across turns counts once.
    _tokens: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    _sizes: dict[str, tuple[int, ...]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(tool.name for tool in self.tools)

    @property
    def key(self) -> tuple[tuple[str, ...], str]:
        """Equal for sets that bind to the model the same way."""
        return self.names, self.revision

    def schema_tokens(self, counter: TokenCounter) -> int:
        """The tokens of the schemas as one tool list (what the guard counts)."""
        found = self._tokens.get(counter.encoding)
        if found is None:
            found = self._tokens[counter.encoding] = counter.count_tool_schemas(self.schemas)
        return found

    def schema_sizes(self, counter: TokenCounter) -> tuple[int, ...]:
        """Each schema's own tokens (what the model view lists against each tool)."""
        found = self._sizes.get(counter.encoding)
        if found is None:
            found = tuple(counter.count_tool_schemas([schema]) for schema in self.schemas)
            self._sizes[counter.encoding] = found
        return found

    @cached_property
    def by_name(self) -> dict[str, BaseTool]:
        return {tool.name: tool for tool in self.tools}

    @classmethod
    def joined(cls, parts: Sequence[ToolSet]) -> ToolSet:
        """The tools of `parts` in order; a name already taken by an earlier part is left out."""
        tools: list[BaseTool] = []
        schemas: list[dict[str, Any]] = []
        seen: set[str] = set()
        for part in parts:
            for tool, schema in zip(part.tools, part.schemas, strict=True):
                if tool.name not in seen:
                    seen.add(tool.name)
                    tools.append(tool)
                    schemas.append(schema)
        revision = "+".join(part.revision for part in parts if part.revision)
        return cls(tuple(tools), tuple(schemas), revision)


class ToolRegistry:
    def __init__(self, tools: Iterable[BaseTool] = ()) -> None:
        self._tools: dict[str, BaseTool] = {}
        self._conditions: dict[str, OfferCondition] = {}
        self._sets: dict[tuple[str, ...], ToolSet] = {}
        self._joined: dict[tuple[tuple[str, ...], tuple[tuple[str, ...], str]], ToolSet] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: BaseTool, *, offered_when: OfferCondition | None = None) -> None:
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        if offered_when is not None:
            self._conditions[tool.name] = offered_when
        self._sets.clear()
        self._joined.clear()

    @property
    def tools(self) -> list[BaseTool]:
        """Every registered tool (what the agent's tool node can run)."""
        return list(self._tools.values())

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        """The function schemas of every registered tool."""
        return [tool_schema(tool) for tool in self._tools.values()]

    def offered(self, facts: TurnFacts, extra: ToolSet | None = None) -> ToolSet:
        """The tools offered under `facts`, in registration order, then `extra` (the turn's
        MCP tools) without any whose name a built-in tool has."""
        own = self._offered(facts)
        if extra is None or not extra.tools:
            return own
        key = (own.names, extra.key)
        found = self._joined.get(key)
        if found is None:
            found = self._joined[key] = ToolSet.joined([own, extra])
        return found

    def _offered(self, facts: TurnFacts) -> ToolSet:
        names = tuple(
            name
            for name in self._tools
            if (condition := self._conditions.get(name)) is None or condition(facts)
        )
        found = self._sets.get(names)
        if found is None:
            tools = tuple(self._tools[name] for name in names)
            found = ToolSet(tools, tuple(tool_schema(tool) for tool in tools))
            self._sets[names] = found
        return found


@dataclass
class AttemptTools:
    """The tools of one attempt: decided again before each model call, from the view the guard
    will send (`offer`, the guard's `ToolOffer`); the model node binds `current`. The built-in
    tools follow the view's facts; the turn's MCP tools (`mcp`, fixed at the turn's start) are
    offered with every call after them."""

    registry: ToolRegistry
    can_browse_history: bool
    mcp: ToolSet | None = None
    current: ToolSet = field(init=False)

    def __post_init__(self) -> None:
        self.current = self.registry.offered(TurnFacts(can_browse_history=self.can_browse_history), self.mcp)

    def offer(self, messages: Sequence[BaseMessage]) -> ToolSet:
        """The tools offered with `messages` (what the guard counts); they become `current`."""
        facts = TurnFacts.of_view(messages, can_browse_history=self.can_browse_history)
        self.current = self.registry.offered(facts, self.mcp)
        return self.current


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
    registry = ToolRegistry()
    registry.register(read_attachment_tool, offered_when=_attachments_in_view)
    registry.register(list_history_tool(), offered_when=_history_is_summarized)
    registry.register(read_message_tool(), offered_when=_history_is_summarized)
    return registry
