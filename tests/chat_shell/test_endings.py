"""Every way a turn ends, through a real `create_react_agent` graph and the scripted provider."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, RemoveMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from chat_shell.contracts import (
    ChainMessage,
    CompactionRecord,
    ContextCompactionEvent,
    ContextMetricsEvent,
    ToolBlock,
    TurnCancelled,
    TurnCompleted,
    TurnEvent,
    TurnFailed,
)
from chat_shell.guard.protocol import ContextRefused, GuardContext
from chat_shell.messages.markers import with_markers
from chat_shell.runtime import ChatShell
from chat_shell.tools.registry import ToolRegistry
from tests.chat_shell.conftest import MakeShell
from tests.chat_shell.passthrough_guard import PassthroughGuard
from tests.support import history as entries
from tests.support.report_tool import with_report_tool
from tests.support.scripted_provider import (
    Reply,
    ScriptedProvider,
    ScriptedToolCall,
    http_error,
    text,
    tool_call,
)
from tests.support.servers import free_port
from tests.support.turns import collect, deltas, make_request


def _terminal(events: list[TurnEvent]) -> Any:
    return events[-1]


def _roles(request: dict[str, Any]) -> list[str]:
    return [m["role"] for m in request["messages"]]


class RecordingGuard(PassthroughGuard):
    """Passes everything through and remembers what the runtime gave it."""

    instances: list[RecordingGuard]

    def __init__(self, context: GuardContext) -> None:
        super().__init__(context)
        self.context = context
        self.calls = 0
        RecordingGuard.instances.append(self)

    async def __call__(self, state: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        return await super().__call__(state)


@pytest.fixture
def recording_guards() -> list[RecordingGuard]:
    RecordingGuard.instances = []
    return RecordingGuard.instances


# -- normal completion ---------------------------------------------------------------------


async def test_tool_loop_completes_with_events_blocks_chain_and_usage(
    scripted_provider: ScriptedProvider, shell: ChatShell
) -> None:
    scripted_provider.script(
        tool_call("generate_report", {"rows": 3, "seed": 7}, text="Let me look."),
        text("Three orders found."),
    )
    events = await collect(shell, make_request(1, "show me orders"))
    types = [e.type for e in events]
    assert types[0] == "turn.started" and types[-1] == "turn.completed"
    assert types.index("tool.started") < types.index("tool.completed")
    result = _terminal(events).result
    assert result.termination_reason == "normal_completion"
    # What streamed is what is stored: the paragraph between the rounds is part of a delta.
    assert deltas(events) == result.value == "Let me look.\n\nThree orders found."
    tool_block = result.blocks[1]
    assert [b.type for b in result.blocks] == ["text", "tool", "text"]
    assert isinstance(tool_block, ToolBlock) and tool_block.status == "completed"
    assert tool_block.args == {"rows": 3, "seed": 7}
    assert tool_block.output.startswith("sales report seed=7 rows=3") and not tool_block.truncated_for_model
    assert [(e.role, bool(e.tool_calls)) for e in result.messages_chain] == [
        ("assistant", True),
        ("tool", False),
        ("assistant", False),
    ]
    assert result.messages_chain[1].content == tool_block.output
    assert result.usage.model_calls == 2 and result.usage.provider_reported
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    assert result.ttft_ms is not None and result.ttft_ms > 0
    assert result.context_metrics is not None and result.context_metrics.phase == "final"


async def test_usage_is_marked_unreported_when_the_provider_sends_none(
    scripted_provider: ScriptedProvider, shell: ChatShell
) -> None:
    scripted_provider.script(text("no usage here", omit_usage=True))
    result = _terminal(await collect(shell, make_request())).result
    assert result.usage.provider_reported is False and result.usage.model_calls == 1


async def test_history_with_markers_reaches_the_model_without_them(
    scripted_provider: ScriptedProvider, shell: ChatShell
) -> None:
    history = [
        entries.summary("the budget is 4000 EUR."),
        entries.ai("", entries.call("c-1")),
        entries.tool("c-1", "[compact report]", compacted=True),
        entries.ai("Report read."),
    ]
    scripted_provider.script(text("ok"))
    await collect(
        shell,
        make_request(3, "and now?", history=history),
    )
    sent = scripted_provider.last_request
    raw = json.dumps(sent)
    assert "chat_shell" not in raw and "additional_kwargs" not in raw and "summary_compacted" not in raw
    assert _roles(sent) == ["user", "assistant", "tool", "assistant", "user"]


async def test_hook_written_messages_never_stream_and_the_checkpoint_is_kept(
    scripted_provider: ScriptedProvider, make_shell: MakeShell
) -> None:
    class SummarizingGuard(PassthroughGuard):
        async def __call__(self, state: dict[str, Any]) -> dict[str, Any]:
            if any(getattr(m, "id", None) == "summary" for m in state["messages"]):
                return {"llm_input_messages": state["messages"]}
            summary = with_markers(
                HumanMessage("SUMMARY-TEXT of earlier turns", id="summary"), summary_compacted=True
            )
            retained = with_markers(
                state["messages"][-1].model_copy(update={"id": "retained-user"}), checkpoint_retained=True
            )
            updates = [RemoveMessage(id=REMOVE_ALL_MESSAGES), summary, retained]
            return {"messages": updates, "llm_input_messages": [summary, retained]}

    shell = make_shell(guard_factory=SummarizingGuard)
    history = [ChainMessage(role="user", content=f"old question {i}", id=f"u{i}") for i in range(3)]
    scripted_provider.script(tool_call("generate_report", {"rows": 1}), text("answer"))
    events = await collect(shell, make_request(4, "current question", history=history))
    assert "SUMMARY-TEXT" not in deltas(events)
    assert deltas(events) == "answer"
    chain = _terminal(events).result.messages_chain
    assert [(e.id, e.role) for e in chain[:2]] == [("summary", "user"), ("retained-user", "user")]
    assert chain[0].metadata.summary_compacted and chain[1].metadata.checkpoint_retained
    assert [e.role for e in chain[2:]] == ["assistant", "tool", "assistant"]
    assert all("old question" not in json.dumps(e.content) for e in chain)


async def test_compacted_tool_output_is_flagged_and_the_raw_output_kept_for_the_user(
    scripted_provider: ScriptedProvider, make_shell: MakeShell
) -> None:
    class CompactingGuard(PassthroughGuard):
        async def __call__(self, state: dict[str, Any]) -> dict[str, Any]:
            updates = [
                with_markers(m.model_copy(update={"content": "[compact: 200 rows]"}), compacted=True)
                for m in state["messages"]
                if isinstance(m, ToolMessage) and m.content != "[compact: 200 rows]"
            ]
            return {"messages": updates} if updates else {}

    shell = make_shell(guard_factory=CompactingGuard)
    scripted_provider.script(tool_call("generate_report", {"rows": 200}), text("summarized"))
    events = await collect(shell, make_request())
    [completed] = [e for e in events if e.type == "tool.completed"]
    assert completed.truncated_for_model and completed.output.count("\n") == 202
    result = _terminal(events).result
    assert result.blocks[0].truncated_for_model and result.blocks[0].output == completed.output
    assert (
        result.messages_chain[1].content == "[compact: 200 rows]"
        and result.messages_chain[1].metadata.compacted
    )
    assert scripted_provider.last_request["messages"][-1]["content"] == "[compact: 200 rows]"


# -- tools ---------------------------------------------------------------------------------


async def test_a_raising_tool_becomes_a_tool_error_and_the_turn_goes_on(
    scripted_provider: ScriptedProvider, shell: ChatShell
) -> None:
    scripted_provider.script(tool_call("generate_report", {"rows": 0}), text("That did not work."))
    events = await collect(shell, make_request())
    [completed] = [e for e in events if e.type == "tool.completed"]
    assert completed.is_error and "ValueError" in completed.output
    tool_message = scripted_provider.last_request["messages"][-1]
    assert tool_message["role"] == "tool" and "rows must be between 1 and" in tool_message["content"]
    assert _terminal(events).result.termination_reason == "normal_completion"


async def test_a_tool_raising_any_exception_is_reported_to_the_model(
    scripted_provider: ScriptedProvider, make_shell: MakeShell
) -> None:
    @tool
    def explode(reason: str) -> str:
        """Always fails."""
        raise RuntimeError(f"exploded: {reason}")

    shell = make_shell(tools=ToolRegistry([explode]))
    scripted_provider.script(tool_call("explode", {"reason": "disk"}), text("sorry"))
    events = await collect(shell, make_request())
    assert "RuntimeError: exploded: disk" in scripted_provider.last_request["messages"][-1]["content"]
    assert isinstance(_terminal(events), TurnCompleted)


async def test_invalid_json_arguments_get_a_clear_tool_error(
    scripted_provider: ScriptedProvider, shell: ChatShell
) -> None:
    scripted_provider.script(
        Reply(tool_calls=[ScriptedToolCall(name="generate_report", raw_arguments='{"rows": 3,, seed}')]),
        tool_call("generate_report", {"rows": 1}),
        text("fixed it"),
    )
    events = await collect(shell, make_request())
    second = scripted_provider.requests[1]["messages"]
    assert second[-2]["role"] == "assistant" and second[-1]["role"] == "tool"
    assert "not valid JSON" in second[-1]["content"]
    assert second[-1]["tool_call_id"] == second[-2]["tool_calls"][0]["id"]
    completed = [e for e in events if e.type == "tool.completed"]
    assert [e.is_error for e in completed] == [True, False]
    result = _terminal(events).result
    assert result.termination_reason == "normal_completion" and result.value == "fixed it"


async def test_unknown_tool_names_are_answered_not_crashed(
    scripted_provider: ScriptedProvider, shell: ChatShell
) -> None:
    scripted_provider.script(tool_call("no_such_tool", {}), text("ok"))
    events = await collect(shell, make_request())
    assert "no_such_tool" in scripted_provider.last_request["messages"][-1]["content"]
    assert _terminal(events).result.termination_reason == "normal_completion"


# -- tool-call limit -----------------------------------------------------------------------


@pytest.mark.parametrize("limit", [1, 2, 3])
async def test_tool_limit_ends_with_a_recovery_reply_through_the_guard(
    scripted_provider: ScriptedProvider,
    make_shell: MakeShell,
    recording_guards: list[RecordingGuard],
    limit: int,
) -> None:
    shell = make_shell(tool_call_limit=limit, guard_factory=RecordingGuard)
    scripted_provider.script(
        *[tool_call("generate_report", {"rows": 1, "seed": i}) for i in range(limit + 1)]
    )
    scripted_provider.script(text("Here is what I found so far."))
    events = await collect(shell, make_request())
    result = _terminal(events).result
    assert result.termination_reason == "tool_limit_recovery"
    assert [e.type for e in events].count("tool.completed") == limit
    recovery = scripted_provider.last_request
    assert recovery["tool_choice"] == "none" and recovery["tools"]
    assert (
        recovery["messages"][-1]["role"] == "user"
        and "tool-call limit" in recovery["messages"][-1]["content"]
    )
    assert "Sorry, need more steps" not in json.dumps(scripted_provider.requests)
    # The recovery request went through a guard of its own.
    assert len(recording_guards) == 2 and recording_guards[1].calls == 1
    chain = result.messages_chain
    assert chain[-1].role == "assistant" and chain[-1].content == "Here is what I found so far."
    assert "Sorry, need more steps" not in json.dumps([e.model_dump() for e in chain])
    assert "tool-call limit" not in json.dumps([e.model_dump() for e in chain])
    assert deltas(events).endswith("Here is what I found so far.")
    assert await shell.checkpoint_count() == 0


async def test_the_last_allowed_round_still_completes_normally(
    scripted_provider: ScriptedProvider, make_shell: MakeShell
) -> None:
    shell = make_shell(tool_call_limit=1)
    scripted_provider.script(tool_call("generate_report", {"rows": 1}), text("done in one round"))
    result = _terminal(await collect(shell, make_request())).result
    assert result.termination_reason == "normal_completion" and result.value == "done in one round"


async def test_a_recovery_reply_that_still_calls_tools_keeps_its_text_only(
    scripted_provider: ScriptedProvider, make_shell: MakeShell
) -> None:
    shell = make_shell(tool_call_limit=1)
    scripted_provider.script(
        tool_call("generate_report", {"rows": 1}),
        tool_call("generate_report", {"rows": 2}),
        tool_call("generate_report", {"rows": 3}, text="Partial answer."),
    )
    result = _terminal(await collect(shell, make_request())).result
    assert result.termination_reason == "completed_with_unexecuted_tool_calls"
    assert result.messages_chain[-1].content == "Partial answer." and not result.messages_chain[-1].tool_calls


# -- truncated tool calls ------------------------------------------------------------------


def _truncated_call() -> Reply:
    return Reply(
        tool_calls=[ScriptedToolCall(name="generate_report", raw_arguments='{"rows": 40000, "se')],
        finish_reason="length",
    )


async def test_a_truncated_tool_call_is_retried_on_a_fresh_thread_with_guidance(
    scripted_provider: ScriptedProvider, make_shell: MakeShell, recording_guards: list[RecordingGuard]
) -> None:
    shell = make_shell(guard_factory=RecordingGuard)
    scripted_provider.script(
        tool_call("generate_report", {"rows": 1}, text="First a small one."),
        _truncated_call(),
        tool_call("generate_report", {"rows": 2}),
        text("All done."),
    )
    events = await collect(shell, make_request())
    result = _terminal(events).result
    assert result.termination_reason == "normal_completion" and result.attempts == 2
    retry = scripted_provider.requests[2]["messages"]
    assert retry[-1]["role"] == "user" and "(Retry 1 of 3.)" in retry[-1]["content"]
    # Seeded from the state as it was: the first round is there, the truncated call is not.
    assert _roles({"messages": retry[:-1]}) == ["user", "assistant", "tool"]
    assert "40000" not in json.dumps(scripted_provider.requests[2:])
    # The guidance lived in that one request only.
    assert "Retry 1 of 3" not in json.dumps(scripted_provider.requests[3])
    assert "Retry" not in json.dumps([e.model_dump() for e in result.messages_chain])
    assert [e.role for e in result.messages_chain] == ["assistant", "tool", "assistant", "tool", "assistant"]
    assert [g.context.original_input_ids for g in recording_guards] == [
        recording_guards[0].context.original_input_ids
    ] * 2
    assert not any(g.context.force_compaction for g in recording_guards)
    # The truncated call never ran and never showed as a tool block.
    assert [b.args for b in result.blocks if isinstance(b, ToolBlock)] == [{"rows": 1}, {"rows": 2}]


async def test_truncation_retries_are_bounded(
    scripted_provider: ScriptedProvider, make_shell: MakeShell
) -> None:
    shell = make_shell(truncation_retries=2)
    scripted_provider.script(_truncated_call(), _truncated_call(), _truncated_call(), text("never reached"))
    events = await collect(shell, make_request())
    terminal = _terminal(events)
    assert isinstance(terminal, TurnFailed) and terminal.code == "truncation_retry_exhausted"
    assert terminal.result.termination_reason == "truncation_retry_exhausted"
    assert len(scripted_provider.requests) == 3 and terminal.result.messages_chain == []
    assert await shell.checkpoint_count() == 0


# -- refusal, provider failures, cancellation ----------------------------------------------


async def test_a_refusing_guard_ends_the_turn_without_calling_the_provider(
    scripted_provider: ScriptedProvider, make_shell: MakeShell
) -> None:
    message = "Your message is 9000 tokens over the 4000 tokens this model can take. Please shorten it."

    class RefusingGuard(PassthroughGuard):
        async def __call__(self, state: dict[str, Any]) -> dict[str, Any]:
            raise ContextRefused(message, needed_tokens=13000, available_tokens=4000)

    shell = make_shell(guard_factory=RefusingGuard)
    events = await collect(shell, make_request())
    terminal = _terminal(events)
    assert isinstance(terminal, TurnFailed) and terminal.code == "context_refused"
    assert terminal.message == message
    # The refusal is the failure's message, never text of the reply (no model wrote it).
    assert terminal.result.termination_reason == "context_refused"
    assert terminal.result.value == terminal.partial == "" and terminal.result.blocks == []
    assert scripted_provider.requests == []
    assert not any(e.type == "message.delta" for e in events)


@pytest.mark.parametrize(
    ("reply", "code", "partial"),
    [
        (http_error(500), "provider_unavailable", ""),
        (http_error(401), "provider_auth", ""),
        (Reply(text="Half an ans", stream_fault="malformed"), "provider_stream_error", "Half an ans"),
        (Reply(text="Half an ans", stream_fault="error_event"), "provider_stream_error", "Half an ans"),
        (Reply(text="Half an ans", hang=True), "provider_timeout", "Half an ans"),
        (Reply(hang=True), "provider_timeout", ""),
    ],
    ids=["5xx", "auth", "malformed", "error-event", "hang-mid-stream", "hang-before-first-token"],
)
async def test_provider_failures_end_failed_with_the_partial_text(
    scripted_provider: ScriptedProvider, make_shell: MakeShell, reply: Reply, code: str, partial: str
) -> None:
    # Long enough that the first, prompt reply never times out on a busy machine.
    shell = make_shell(timeout=2.0)
    scripted_provider.script(tool_call("generate_report", {"rows": 1}, text="Checking. "), reply)
    events = await collect(shell, make_request())
    terminal = _terminal(events)
    assert isinstance(terminal, TurnFailed) and terminal.code == code
    assert terminal.partial == deltas(events) == ("Checking. \n\n" + partial if partial else "Checking. ")
    assert terminal.result.termination_reason == "provider_error"
    # The finished tool round is kept for the model; nothing half-done is.
    assert [e.role for e in terminal.result.messages_chain] == ["assistant", "tool"]
    assert await shell.checkpoint_count() == 0


async def test_a_slow_provider_is_not_a_failure(
    scripted_provider: ScriptedProvider, make_shell: MakeShell
) -> None:
    shell = make_shell(timeout=1.0)
    scripted_provider.script(text("slow but fine", first_token_delay=0.3, token_delay=0.05))
    result = _terminal(await collect(shell, make_request())).result
    assert result.termination_reason == "normal_completion" and result.ttft_ms >= 300


async def test_provider_down_fails_with_a_clear_code(make_shell: MakeShell) -> None:
    shell = make_shell(base_url=f"http://127.0.0.1:{free_port()}/v1")
    terminal = _terminal(await collect(shell, make_request()))
    assert isinstance(terminal, TurnFailed) and terminal.code == "provider_unavailable"
    assert await shell.checkpoint_count() == 0


async def test_an_overflow_that_compaction_cannot_cure_is_refused_after_one_retry(
    scripted_provider: ScriptedProvider, make_shell: MakeShell
) -> None:
    scripted_provider.context_window = 100
    shell = make_shell(max_output_tokens=10)
    terminal = _terminal(await collect(shell, make_request(1, "word " * 200)))
    assert isinstance(terminal, TurnFailed) and terminal.code == "context_refused"
    assert terminal.result.overflow_errors == 2 and len(scripted_provider.chat_requests) == 2


async def _cancel_after_first_delta(shell: ChatShell) -> list[TurnEvent]:
    cancel = asyncio.Event()
    events: list[TurnEvent] = []
    async for event in shell.run(make_request(), cancel):
        events.append(event)
        if event.type == "message.delta" and not cancel.is_set():
            cancel.set()
    return events


async def test_cancel_stops_the_stream_and_keeps_the_partial_text(
    scripted_provider: ScriptedProvider, shell: ChatShell
) -> None:
    scripted_provider.script(text("one two three four five six seven eight nine ten", token_delay=0.1))
    events = await _cancel_after_first_delta(shell)
    terminal = _terminal(events)
    assert isinstance(terminal, TurnCancelled)
    assert terminal.partial == deltas(events) and 0 < len(terminal.partial) < 20
    assert terminal.result.termination_reason == "cancelled"
    assert await shell.checkpoint_count() == 0


async def test_cancel_during_a_tool_keeps_finished_rounds_only(
    scripted_provider: ScriptedProvider, make_shell: MakeShell
) -> None:
    started = asyncio.Event()

    @tool
    async def slow_lookup(query: str) -> str:
        """Takes a while."""
        started.set()
        await asyncio.sleep(30)
        return "never"

    tools = with_report_tool()
    tools.register(slow_lookup)
    shell = make_shell(tools=tools)
    scripted_provider.script(
        tool_call("generate_report", {"rows": 1}, text="Step one."), tool_call("slow_lookup", {"query": "x"})
    )
    cancel = asyncio.Event()

    async def cancel_while_the_tool_runs() -> None:
        await started.wait()
        cancel.set()  # from another task, while the turn awaits the tool

    events: list[TurnEvent] = []
    watcher: asyncio.Task[None] | None = None
    async for event in shell.run(make_request(), cancel):
        events.append(event)
        if event.type == "tool.started" and event.name == "slow_lookup":
            watcher = asyncio.create_task(cancel_while_the_tool_runs())
    assert watcher is not None and watcher.done()
    terminal = _terminal(events)
    assert isinstance(terminal, TurnCancelled) and terminal.partial == "Step one."
    slow_block = terminal.result.blocks[-1]
    assert (
        isinstance(slow_block, ToolBlock)
        and slow_block.name == "slow_lookup"
        and slow_block.status == "error"
    )
    assert [e.role for e in terminal.result.messages_chain] == ["assistant", "tool"]
    assert await shell.checkpoint_count() == 0


async def test_cancel_while_waiting_for_the_provider_stops_at_once(
    scripted_provider: ScriptedProvider, shell: ChatShell
) -> None:
    cancel, asked = asyncio.Event(), asyncio.Event()

    def slow_reply(_: dict[str, Any]) -> Reply:
        asked.set()
        return Reply(hang=True)

    scripted_provider.script(slow_reply)

    async def cancel_once_asked() -> None:
        await asked.wait()
        cancel.set()  # from another task, while the turn awaits the first token

    watcher = asyncio.create_task(cancel_once_asked())
    started = asyncio.get_running_loop().time()
    events = await collect(shell, make_request(), cancel=cancel)
    await watcher
    terminal = _terminal(events)
    assert isinstance(terminal, TurnCancelled) and terminal.partial == ""
    assert terminal.result.termination_reason == "cancelled"
    assert asyncio.get_running_loop().time() - started < 10
    assert await shell.checkpoint_count() == 0


async def test_a_caller_that_stops_listening_leaves_nothing_behind(
    scripted_provider: ScriptedProvider, shell: ChatShell, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="chat_shell.runtime")
    scripted_provider.script(text("a long answer " * 20, token_delay=0.02))
    stream = shell.run(make_request())
    async for event in stream:
        if event.type == "message.delta":
            break
    await stream.aclose()
    # Stopped and cleaned up by the time `aclose` returns, not later by garbage collection.
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("[Persistence]")]
    assert "ending=abandoned" in line and line.endswith("deleted=True")
    assert await shell.checkpoint_count() == 0


async def test_no_thread_survives_a_hundred_turns_of_mixed_endings(
    scripted_provider: ScriptedProvider, make_shell: MakeShell
) -> None:
    shell = make_shell(timeout=0.3, tool_call_limit=1, truncation_retries=1)
    scripts: list[list[Reply]] = [
        [text("plain")],
        [tool_call("generate_report", {"rows": 2}), text("with tool")],
        [
            tool_call("generate_report", {"rows": 1}),
            tool_call("generate_report", {"rows": 1}),
            text("recovered"),
        ],
        [_truncated_call(), text("after retry")],
        [_truncated_call(), _truncated_call()],
        [http_error(503)],
        [Reply(text="cut", stream_fault="malformed")],
        [Reply(text="stall", hang=True)],
        [tool_call("generate_report", {"rows": 0}), text("tool error handled")],
        [text("to be cancelled " * 5, token_delay=0.01)],
    ]
    endings: dict[str, int] = {}
    for turn in range(100):
        script = scripts[turn % len(scripts)]
        scripted_provider.script(*script)
        if turn % len(scripts) == len(scripts) - 1:
            events = await _cancel_after_first_delta(shell)
        else:
            events = await collect(shell, make_request(turn + 1))
        reason = _terminal(events).result.termination_reason
        endings[reason] = endings.get(reason, 0) + 1
        scripted_provider.replies.clear()
    assert await shell.checkpoint_count() == 0
    assert not shell.checkpointer.storage and not shell.checkpointer.writes and not shell.checkpointer.blobs
    assert set(endings) == {
        "normal_completion",
        "tool_limit_recovery",
        "truncation_retry_exhausted",
        "provider_error",
        "cancelled",
    }


async def test_a_request_without_history_or_loader_fails_clearly(shell: ChatShell) -> None:
    request = make_request().model_copy(update={"history": None})
    terminal = _terminal(await collect(shell, request))
    assert isinstance(terminal, TurnFailed) and terminal.code == "history_unavailable"


async def test_guard_events_arrive_in_order_and_compactions_reach_the_result(
    scripted_provider: ScriptedProvider, make_shell: MakeShell
) -> None:
    record = CompactionRecord(
        status="completed", before_tokens=900, after_tokens=300, created_at=datetime.now(UTC)
    )

    class ReportingGuard(PassthroughGuard):
        def __init__(self, context: GuardContext) -> None:
            super().__init__(context)
            self.emit = context.emit
            self.calls = 0

        async def __call__(self, state: dict[str, Any]) -> dict[str, Any]:
            self.calls += 1
            self.emit(ContextMetricsEvent(snapshot=self.final_metrics(state["messages"])))
            if self.calls == 2:
                self.emit(ContextCompactionEvent(record=record))
            return await super().__call__(state)

        @property
        def compactions(self) -> list[CompactionRecord]:
            return [record] if self.calls >= 2 else []

    shell = make_shell(guard_factory=ReportingGuard)
    scripted_provider.script(tool_call("generate_report", {"rows": 1}, text="Looking."), text("Found it."))
    events = await collect(shell, make_request())
    types = [e.type for e in events]
    assert types[:3] == ["turn.started", "context.metrics", "message.delta"]
    second_call = types.index("context.metrics", 2)
    assert types[second_call : second_call + 2] == ["context.metrics", "context.compaction"]
    # The tool result is announced once this guard pass has decided how the model sees it.
    assert types.index("tool.started") < second_call < types.index("tool.completed")
    assert types.index("tool.completed") < types.index("message.delta", second_call)
    assert _terminal(events).result.context_compactions == [record]


async def test_concurrent_turns_do_not_mix(scripted_provider: ScriptedProvider, shell: ChatShell) -> None:
    # The provider echoes each request's last user message (its default reply).
    runs = await asyncio.gather(
        *(collect(shell, make_request(turn, f"question number {turn}")) for turn in range(1, 7))
    )
    for turn, events in enumerate(runs, start=1):
        assert _terminal(events).result.value == f"Echo: question number {turn}"
        assert deltas(events) == f"Echo: question number {turn}"


async def test_parallel_tool_calls_each_get_a_block_and_an_answer(
    scripted_provider: ScriptedProvider, shell: ChatShell
) -> None:
    scripted_provider.script(
        Reply(
            tool_calls=[
                ScriptedToolCall(id="call_1", name="generate_report", args={"rows": 1}),
                ScriptedToolCall(id="call_2", name="generate_report", args={"rows": 2}),
            ]
        ),
        text("both done"),
    )
    result = _terminal(await collect(shell, make_request())).result
    assert [(b.call_id, b.status) for b in result.blocks if isinstance(b, ToolBlock)] == [
        ("call_1", "completed"),
        ("call_2", "completed"),
    ]
    assert sorted(
        m["tool_call_id"] for m in scripted_provider.last_request["messages"] if m["role"] == "tool"
    ) == [
        "call_1",
        "call_2",
    ]


async def test_usage_carries_the_providers_hidden_overhead(
    scripted_provider: ScriptedProvider, shell: ChatShell
) -> None:
    scripted_provider.script(text("first"), text("second"))
    plain = _terminal(await collect(shell, make_request(1, "same question"))).result.usage
    scripted_provider.hidden_overhead = 1234
    loaded = _terminal(await collect(shell, make_request(1, "same question"))).result.usage
    assert loaded.input_tokens - plain.input_tokens == 1234


async def test_each_attempt_logs_one_persistence_line(
    scripted_provider: ScriptedProvider, shell: ChatShell, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="chat_shell.runtime")
    scripted_provider.script(_truncated_call(), tool_call("generate_report", {"rows": 1}), text("ok"))
    await collect(shell, make_request())
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("[Persistence]")]
    assert len(lines) == 2
    assert "path=initial ending=truncated chain=0" in lines[0]
    assert "path=truncation_retry ending=completed chain=3 summary=False tool_pairs=1" in lines[1]
    assert all(line.endswith("checkpoints=1 deleted=True") for line in lines)


async def test_tool_calls_without_ids_still_get_answered(
    scripted_provider: ScriptedProvider, shell: ChatShell
) -> None:
    scripted_provider.script(
        Reply(tool_calls=[ScriptedToolCall(id="", name="generate_report", args={"rows": 1})]), text("ok")
    )
    result = _terminal(await collect(shell, make_request())).result
    assistant, answer = scripted_provider.last_request["messages"][-2:]
    assert assistant["tool_calls"][0]["id"] and answer["tool_call_id"] == assistant["tool_calls"][0]["id"]
    assert result.termination_reason == "normal_completion" and result.blocks[0].status == "completed"
