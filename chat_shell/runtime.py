"""`ChatShell`: the in-process turn runtime (package mode).

    shell = ChatShell(RuntimeConfig(provider=ProviderConfig(base_url=...), model="gpt-4o"))
    async for event in shell.run(request, cancel):
        ...  # turn.started first, exactly one terminal event last

One `InMemorySaver` belongs to the instance and holds only the threads of attempts that are
running right now (each is deleted when its attempt ends). Compiled graphs are cached per
model, so a turn compiles nothing; the tools offered vary per attempt (see `ToolRegistry`).

What the host serves a turn (history, attachments, the user-visible record) comes from a
`Host`: fixed in-process implementations (package mode), or clients of the backend built from
the request's `backend` access (service mode, `chat_shell.host.remote.RemoteHost`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.state import CompiledStateGraph

from chat_shell.agents.builder import build_agent
from chat_shell.agents.runner import TurnExecution, TurnSetup
from chat_shell.compression.budget import budget_for
from chat_shell.compression.token_counter import text_counter_for
from chat_shell.contracts import (
    TERMINAL_EVENT_TYPES,
    AttachmentReader,
    HistoryBrowser,
    HistoryLoader,
    TurnEvent,
    TurnRequest,
)
from chat_shell.guard.factory import build_guard
from chat_shell.guard.protocol import (
    COMPACTION_HEARTBEAT_SECONDS,
    SUMMARY_TIMEOUT_SECONDS,
    GuardFactory,
    Summarizer,
)
from chat_shell.host import FixedHost, Host, TurnServices
from chat_shell.observability.turn_telemetry import TurnTelemetry
from chat_shell.providers.openai import ProviderConfig, create_chat_model
from chat_shell.providers.profiles import ModelProfile, resolve_profile
from chat_shell.providers.summarizer import ModelSummarizer
from chat_shell.tools.registry import ToolRegistry, default_tools


@dataclass(frozen=True)
class RuntimeConfig:
    provider: ProviderConfig
    # The model of turns whose request names none.
    model: str
    # Profile overrides (CHAT_SHELL_CONTEXT_WINDOW / CHAT_SHELL_MAX_OUTPUT_TOKENS).
    context_window: int | None = None
    max_output_tokens: int | None = None
    # Model<->tool rounds per turn before the tool-limit recovery reply.
    tool_call_limit: int = 30
    # Fresh-thread retries after a tool call cut off by the output limit.
    truncation_retries: int = 3
    # Used when a request carries no system prompt of its own.
    system_prompt: str | None = None
    # Summary compaction: the summarizer call's time limit and the heartbeat interval.
    summary_timeout_seconds: float = SUMMARY_TIMEOUT_SECONDS
    compaction_heartbeat_seconds: float = COMPACTION_HEARTBEAT_SECONDS
    # Per-profile guard settings (SPEC 4): model id -> ModelProfile fields; "*" applies to all.
    profile_overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


class ChatShell:
    def __init__(
        self,
        config: RuntimeConfig,
        *,
        tools: ToolRegistry | None = None,
        guard_factory: GuardFactory | None = None,
        history_loader: HistoryLoader | None = None,
        attachments: AttachmentReader | None = None,
        history_browser: HistoryBrowser | None = None,
        host: Host | None = None,
    ) -> None:
        """`host` serves each turn; without it, the given loader and readers serve every turn."""
        if host is not None and (history_loader, attachments, history_browser) != (None, None, None):
            raise ValueError("give either a host or fixed services, not both")
        self.config = config
        self.tools = tools if tools is not None else default_tools()
        self.checkpointer = InMemorySaver()
        self._guard_factory = guard_factory or build_guard
        self._host = host or FixedHost(TurnServices(history_loader, attachments, history_browser))
        self._graphs: dict[tuple[str, int, bool], CompiledStateGraph] = {}
        self._summarizers: dict[tuple[str, int], Summarizer] = {}
        # Load the default model's tokenizer now, not inside the first turn (it takes ~0.3 s).
        text_counter_for(self.profile())

    def profile(self, model: str | None = None) -> ModelProfile:
        return resolve_profile(
            model or self.config.model,
            context_window=self.config.context_window,
            max_output_tokens=self.config.max_output_tokens,
            overrides=self.config.profile_overrides,
        )

    def graph(self, profile: ModelProfile, *, answer_only: bool) -> CompiledStateGraph:
        key = (profile.name, profile.max_output_tokens, answer_only)
        graph = self._graphs.get(key)
        if graph is None:
            model = create_chat_model(profile, self.config.provider)
            graph = build_agent(
                model, self.tools.tools, checkpointer=self.checkpointer, answer_only=answer_only
            )
            self._graphs[key] = graph
        return graph

    def summarizer(self, profile: ModelProfile) -> Summarizer:
        """The model summary compaction calls: the turn's model, non-streaming, with the summary
        timeout and room for a summary twice its cap (a longer one gets a shortening pass)."""
        cap = budget_for(profile).summary_max_tokens
        key = (profile.name, cap)
        summarizer = self._summarizers.get(key)
        if summarizer is None:
            model = create_chat_model(
                replace(profile, max_output_tokens=min(profile.max_output_tokens, 2 * cap)),
                replace(self.config.provider, timeout_seconds=self.config.summary_timeout_seconds),
                purpose="summary",
            )
            summarizer = self._summarizers[key] = ModelSummarizer(model)
        return summarizer

    async def checkpoint_count(self) -> int:
        """Checkpoints held for any thread (zero whenever no turn is running)."""
        return len([c async for c in self.checkpointer.alist(None)])

    async def run(
        self, request: TurnRequest, cancel: asyncio.Event | None = None
    ) -> AsyncIterator[TurnEvent]:
        """The turn's events; setting `cancel` stops it (partial output kept, `turn.cancelled`)."""
        profile = self.profile(request.model)
        telemetry = TurnTelemetry(request, profile, default_model=self.config.model)
        setup = TurnSetup(
            profile=profile,
            graphs=self.graph,
            checkpointer=self.checkpointer,
            guard_factory=self._guard_factory,
            tools=self.tools,
            tool_call_limit=self.config.tool_call_limit,
            truncation_retries=self.config.truncation_retries,
            system_prompt=request.system_prompt or self.config.system_prompt,
            services=self._host.services(request),
            summarizer=self.summarizer(profile),
            summary_timeout_seconds=self.config.summary_timeout_seconds,
            compaction_heartbeat_seconds=self.config.compaction_heartbeat_seconds,
        )
        queue: asyncio.Queue[TurnEvent | None] = asyncio.Queue()
        execution = TurnExecution(
            setup, request, cancel or asyncio.Event(), telemetry.watch(queue.put_nowait)
        )
        task = asyncio.create_task(telemetry.run(execution.execute()))
        task.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (event := await queue.get()) is not None:
                yield event
                if event.type in TERMINAL_EVENT_TYPES:
                    return
            task.result()
            raise RuntimeError("the turn ended without a terminal event")
        finally:
            if not task.done():
                # The caller stopped listening: stop the turn; its threads are deleted on the way out.
                task.cancel()
                await asyncio.wait({task})
