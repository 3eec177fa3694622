"""How the built-in tools are made: one shape, so each answers its own errors the same way."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.tools import StructuredTool
from pydantic import BaseModel


def built_in_tool(
    run: Callable[..., Awaitable[str]], *, name: str, description: str, args_schema: type[BaseModel]
) -> StructuredTool:
    """A tool whose `ToolException`s and invalid arguments reach the model as its result, so the
    model can correct the call instead of the turn failing."""
    options: dict[str, Any] = {"handle_tool_error": True, "handle_validation_error": True}
    return StructuredTool.from_function(
        coroutine=run, name=name, description=description, args_schema=args_schema, **options
    )
