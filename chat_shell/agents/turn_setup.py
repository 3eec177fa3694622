"""What the runtime hands each turn: shared and read-only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph

from chat_shell.agents.guard_context import GuardBasis
from chat_shell.guard.protocol import GuardFactory
from chat_shell.providers.profiles import ModelProfile
from chat_shell.tools.mcp import McpToolbox


class GraphSource(Protocol):
    def __call__(self, profile: ModelProfile, *, answer_only: bool) -> CompiledStateGraph: ...


@dataclass(frozen=True)
class TurnSetup:
    """What the runtime hands each turn (shared, read-only)."""

    # The turn's profile, budget and token counter (made once per turn, handed to guards and
    # tools), what the host serves it and the built-in tools.
    guard: GuardBasis
    graphs: GraphSource
    checkpointer: BaseCheckpointSaver
    guard_factory: GuardFactory
    # The MCP servers (None: none configured); each turn uses those its conversation enabled.
    mcp: McpToolbox | None
    tool_call_limit: int
    truncation_retries: int
    system_prompt: str | None
