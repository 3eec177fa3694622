"""The tool set of a runtime: OpenAI-style function tools (LangChain tools), by unique name.

Adding a tool is one `register` call (or a `ToolRegistry([...])`); the runtime binds every
registered tool to the model and runs it in the agent's tool node. A tool that acts for the
turn's conversation reads its per-turn state from the run context (`TurnTools`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from chat_shell.tools.read_attachment import read_attachment_tool
from chat_shell.tools.report import generate_report


class ToolRegistry:
    def __init__(self, tools: Iterable[BaseTool] = ()) -> None:
        self._tools: dict[str, BaseTool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: BaseTool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    @property
    def tools(self) -> list[BaseTool]:
        return list(self._tools.values())

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        """The function schemas the provider receives (the guard counts them as input)."""
        return [convert_to_openai_tool(tool) for tool in self._tools.values()]


def tool_error_message(error: Exception) -> str:
    """What the model sees when a tool raises: the error, and that it may try again."""
    return (
        f"Error: the tool failed with {type(error).__name__}: {error}. "
        "Check the arguments and try again, or answer without this tool."
    )


def default_tools() -> ToolRegistry:
    """The built-in tools every runtime starts with."""
    return ToolRegistry([read_attachment_tool, generate_report])
