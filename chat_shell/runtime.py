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
import logging
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.state import CompiledStateGraph

from chat_shell.accounting.budget import Budget, budget_for
from chat_shell.accounting.text_counter import text_counter_for
from chat_shell.accounting.token_counter import TokenCounter
from chat_shell.agents.builder import build_agent
from chat_shell.agents.guard_context import GuardBasis
from chat_shell.agents.runner import TurnExecution
from chat_shell.agents.turn_setup import TurnSetup
from chat_shell.contracts import (
    FINAL_STATUSES,
    AheadRequest,
    AttachmentReader,
    CompactionStatusSink,
    ContextCompactionEvent,
    HistoryBrowser,
    McpServerInfo,
    NextTurnQuery,
    NextTurnRequest,
    TitleRequest,
    TurnEvent,
    TurnFailed,
    TurnRequest,
    TurnResult,
    TurnStarted,
)
from chat_shell.guard.factory import build_ahead_guard, build_guard, build_preview_guard
from chat_shell.guard.protocol import GuardFactory, Summarizer
from chat_shell.guard.request_record import describe_request
from chat_shell.guard.stages.summary_compaction.settings import CompactionSettings
from chat_shell.host import FixedHost, Host, TurnServices
from chat_shell.messages.convert import ahead_messages
from chat_shell.observability import instruments
from chat_shell.observability.turn_telemetry import TurnTelemetry, count_compaction
from chat_shell.providers.model_spans import task_scope
from chat_shell.providers.openai import ProviderConfig, create_chat_model
from chat_shell.providers.profiles import ModelProfile, resolve_profile
from chat_shell.providers.summarizer import ModelSummarizer
from chat_shell.titles import TITLE_OUTPUT_TOKENS, clean_title, title_messages
from chat_shell.tools.approvals import ApprovalDesk
from chat_shell.tools.mcp import McpToolbox
from chat_shell.tools.mcp_config import StdioServer, StreamableHttpServer
from chat_shell.tools.registry import ToolRegistry, default_tools

UNKNOWN_MODEL = "unknown_model"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelChoice:
    """One model turns may name (by `id`): its endpoint, the name that endpoint knows it by,
    and the model that writes its compaction summaries (another choice's id; None: itself)."""

    id: str
    provider: ProviderConfig
    name: str
    summarizer: str | None = None


@dataclass(frozen=True)
class RuntimeConfig:
    # The endpoint of turns when `models` is empty (any model name goes to it).
    provider: ProviderConfig
    # The model of turns whose request names none.
    model: str
    # The models turns may name, by id, each with its own endpoint; a turn naming another model
    # fails with `unknown_model`. Empty: a single endpoint (`provider`) serves any model name.
    models: Mapping[str, ModelChoice] = field(default_factory=dict)
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
    compaction: CompactionSettings = field(default_factory=CompactionSettings)
    # Per-profile guard settings (SPEC 4): model id -> ModelProfile fields; "*" applies to all.
    profile_overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # The MCP servers whose tools turns may use (CHAT_SHELL_MCP_SERVERS), by name.
    mcp_servers: Mapping[str, StreamableHttpServer | StdioServer] = field(default_factory=dict)

    def choice(self, model: str | None = None) -> ModelChoice | None:
        """What serves `model` (default: the default model); None when no configured model has
        that id."""
        model = model or self.model
        if not self.models:
            return ModelChoice(model, self.provider, model)
        return self.models.get(model)

    def profile(self, model: str | None = None) -> ModelProfile:
        """`model`'s profile: the built-in one of the name its provider knows it by, with the
        configured overrides of its id on top."""
        model = model or self.model
        choice = self.choice(model)
        return resolve_profile(
            model,
            context_window=self.context_window,
            max_output_tokens=self.max_output_tokens,
            overrides=self.profile_overrides,
            lookup=choice.name if choice is not None else None,
        )


class ChatShell:
    def __init__(
        self,
        config: RuntimeConfig,
        *,
        tools: ToolRegistry | None = None,
        guard_factory: GuardFactory | None = None,
        attachments: AttachmentReader | None = None,
        history_browser: HistoryBrowser | None = None,
        host: Host | None = None,
    ) -> None:
        """`host` serves each turn; without it, the given readers serve every turn (package
        mode, whose requests carry their resolved history)."""
        if host is not None and (attachments, history_browser) != (None, None):
            raise ValueError("give either a host or fixed services, not both")
        self.config = config
        self.tools = tools if tools is not None else default_tools()
        self.mcp = McpToolbox.from_config(config.mcp_servers) if config.mcp_servers else None
        self.checkpointer = InMemorySaver()
        self.approvals = ApprovalDesk()
        self._guard_factory = guard_factory or build_guard
        self._host = host or FixedHost(TurnServices(attachments=attachments, originals=history_browser))
        self._graphs: dict[tuple[str, int, bool], CompiledStateGraph] = {}
        # The summarizers' models by (writer, purpose, output tokens).
        self._summarizers: dict[tuple[str, str, int], Summarizer] = {}
        # Load the default model's tokenizer now, not inside the first turn (it takes ~0.3 s).
        text_counter_for(self.profile())

    def profile(self, model: str | None = None) -> ModelProfile:
        return self.config.profile(model)

    def _choice(self, model: str) -> ModelChoice:
        choice = self.config.choice(model)
        if choice is None:
            raise KeyError(model)
        return choice

    def graph(self, profile: ModelProfile, *, answer_only: bool) -> CompiledStateGraph:
        key = (profile.name, profile.max_output_tokens, answer_only)
        graph = self._graphs.get(key)
        if graph is None:
            choice = self._choice(profile.name)
            model = create_chat_model(profile, choice.provider, model_name=choice.name)
            graph = build_agent(
                model, self.tools.tools, checkpointer=self.checkpointer, answer_only=answer_only
            )
            self._graphs[key] = graph
        return graph

    def summarizer(self, profile: ModelProfile, budget: Budget) -> Summarizer:
        """The model summary compaction calls, with room for a summary twice its cap (a longer
        one gets a shortening pass)."""
        return self._writer(profile, "summary", 2 * budget.summary_max_tokens)[1]

    def _writer(
        self, profile: ModelProfile, purpose: str, output_tokens: int
    ) -> tuple[ModelChoice, Summarizer]:
        """`profile`'s summarizer (the turn's model unless configured otherwise) for non-streaming
        calls of `purpose` (summaries, titles): the summary timeout and temperature, at most
        `output_tokens` of output."""
        writer = self._choice(self._choice(profile.name).summarizer or profile.name)
        key = (writer.id, purpose, output_tokens)
        summarizer = self._summarizers.get(key)
        if summarizer is None:
            writer_profile = profile if writer.id == profile.name else self.profile(writer.id)
            room = min(writer_profile.max_output_tokens, output_tokens)
            model = create_chat_model(
                replace(writer_profile, max_output_tokens=room),
                replace(writer.provider, timeout_seconds=self.config.compaction.summary_timeout_seconds),
                purpose=purpose,
                model_name=writer.name,
                temperature=self.config.compaction.summary_temperature,
            )
            summarizer = self._summarizers[key] = ModelSummarizer(model)
        return writer, summarizer

    async def write_title(self, request: TitleRequest) -> str | None:
        """A short title for a conversation's first exchange, written by the summarizer's model
        and traced and counted as a `title` call; None when the model is not configured, its
        call failed or its answer cleans to nothing (the conversation keeps its first line)."""
        model = request.model or self.config.model
        if self.config.choice(model) is None:
            return None
        profile = self.profile(model)
        writer, write = self._writer(profile, "title", TITLE_OUTPUT_TOKENS)
        messages = title_messages(request, text_counter_for(profile))
        label = instruments.profile_label(profile.name, self.config.model)
        conversation = {"gen_ai.conversation.id": str(request.conversation_id)}
        with task_scope("chat_shell.title", label, {**conversation, "chat_shell.model_profile": label}):
            try:
                answer = await write(messages)
            except Exception as exc:  # any provider fault: the first line stays the title
                log.warning("conversation %s: no title from %s: %s", request.conversation_id, writer.id, exc)
                return None
        return clean_title(answer)

    def start(self) -> None:
        """Start connecting to the MCP servers (from inside the event loop turns will run on)."""
        if self.mcp is not None:
            self.mcp.start()

    async def aclose(self) -> None:
        """Disconnect the MCP servers (their processes and sessions end)."""
        if self.mcp is not None:
            await self.mcp.aclose()

    async def mcp_servers(self) -> list[McpServerInfo]:
        return await self.mcp.listing() if self.mcp is not None else []

    async def decide(self, turn_id: int, call_id: str, allow: bool) -> bool:
        return self.approvals.decide(turn_id, call_id, allow)

    async def checkpoint_count(self) -> int:
        """Checkpoints held for any thread (zero whenever no turn is running)."""
        return len([c async for c in self.checkpointer.alist(None)])

    def run(
        self, request: TurnRequest, cancel: asyncio.Event | None = None
    ) -> AsyncGenerator[TurnEvent, None]:
        """The turn's events, produced as the caller iterates them; setting `cancel` stops the
        turn (partial output kept, `turn.cancelled`), and so does `aclose()`. A turn naming a
        model that is not configured fails with `unknown_model`."""
        model = request.model or self.config.model
        if self.config.choice(model) is None:
            return _unknown_model(model, sorted(self.config.models))
        profile = self.profile(model)
        budget = budget_for(profile)  # once per turn; everything below is handed it
        setup = TurnSetup(
            guard=self._guard_basis(profile, budget, self._host.services(request)),
            graphs=self.graph,
            checkpointer=self.checkpointer,
            guard_factory=self._guard_factory,
            mcp=self.mcp,
            tool_call_limit=self.config.tool_call_limit,
            truncation_retries=self.config.truncation_retries,
            system_prompt=request.system_prompt or self.config.system_prompt,
        )
        execution = TurnExecution(setup, request, cancel or asyncio.Event())
        telemetry = TurnTelemetry(request, profile, budget, default_model=self.config.model)
        events = self.approvals.serving(request.turn_id, execution.approvals, execution.events())
        return telemetry.observe_turn(events)

    def _guard_basis(
        self, profile: ModelProfile, budget: Budget, services: TurnServices, *, summarize: bool = True
    ) -> GuardBasis:
        """What every guard this runtime builds starts from (a turn's attempts, a compaction
        ahead of time, the next turn's preview)."""
        return GuardBasis(
            profile=profile,
            budget=budget,
            counter=TokenCounter.for_profile(profile),
            services=services,
            tools=self.tools,
            summarizer=self.summarizer(profile, budget) if summarize else None,
            compaction=self.config.compaction,
        )

    async def compact_ahead(
        self, request: AheadRequest, on_status: CompactionStatusSink
    ) -> ContextCompactionEvent | None:
        """Compaction ahead of time (between turns, no reply): the view the next turn would
        start from goes through the same guard stages and the same compactor as a turn's first
        model call, against the profile's pre-trigger instead of the trigger. Returns the final
        status: `completed` carries the checkpoint chain exactly as an in-turn compaction
        reports it (the finished turn's own entries kept as they are), `fallback` its reason;
        None when the next request is below the pre-trigger. Package mode only (a service-mode
        host reads history per turn): elsewhere None, and turns compact inline as before."""
        if not isinstance(self._host, FixedHost):
            return None
        profile = self.profile(request.model)
        if not profile.compaction_enabled:
            return None
        derived = budget_for(profile)
        budget = replace(derived, keep=derived.ahead_keep)
        basis = self._guard_basis(profile, budget, self._host.fixed)
        system_prompt = request.system_prompt or self.config.system_prompt
        messages = ahead_messages(request.history, system_prompt, request.instructions)
        final: list[ContextCompactionEvent] = []

        def emit(event: TurnEvent) -> None:
            if isinstance(event, ContextCompactionEvent):
                if event.record.status in FINAL_STATUSES:
                    final.append(event)
                on_status(event)

        guard = build_ahead_guard(
            basis.context(
                conversation_id=request.conversation_id,
                turn_id=request.turn_id,
                # The next turn's built-in tools, decided on the view like every model call's.
                tools=basis.offered(),
                emit=emit,
                assistant_message_id=request.assistant_message_id,
            ),
            frozenset(request.own_ids),
        )
        if await guard.compact_ahead(messages) is None or not final:
            return None
        count_compaction(instruments.profile_label(profile.name, self.config.model), final[-1].record)
        return final[-1]

    async def preview_next(self, query: NextTurnQuery) -> NextTurnRequest | None:
        """The request the conversation's next turn would send before its user message: the
        same start, tools (built-in and the conversation's MCP servers) and source stages as
        that turn's first model call, no model called. Package mode only, as `compact_ahead`."""
        if not isinstance(self._host, FixedHost):
            return None
        model = query.model or self.config.model
        if self.config.choice(model) is None:
            return None
        profile = self.profile(model)
        # No summary stage: the preview calls no model.
        basis = self._guard_basis(profile, budget_for(profile), self._host.fixed, summarize=False)
        mcp_tools = await self.mcp.offer(query.mcp_servers) if self.mcp is not None else None
        offered = basis.offered(mcp_tools)
        guard = build_preview_guard(
            basis.context(
                conversation_id=query.conversation_id, turn_id=0, tools=offered, emit=lambda _: None
            )
        )
        system_prompt = query.system_prompt or self.config.system_prompt
        messages = ahead_messages(query.history, system_prompt, query.instructions)
        shown, summary_due = await guard.preview(messages)
        instructions = query.instructions
        request = describe_request(
            shown, offered.current, basis.counter, attempt=1, instructions=instructions, with_input=False
        )
        return NextTurnRequest(request=request, summary_due=summary_due)


async def _unknown_model(model: str, known: list[str]) -> AsyncGenerator[TurnEvent, None]:
    yield TurnStarted(model=model, profile=model)
    yield TurnFailed(
        code=UNKNOWN_MODEL,
        message=f"The model {model!r} is not configured here; configured models: {', '.join(known)}.",
        result=TurnResult(value="", termination_reason="internal_error"),
    )
