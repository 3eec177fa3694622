"""Traces and metrics of turns (SPEC 5.8), read from the SDK's in-memory exporters.

The OpenTelemetry SDK is the backend's own setup (`backend.telemetry`) with an in-memory span
exporter and metric reader attached; metrics are cumulative for the process, so each test
reads the change its own turns made.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.tools import tool

from chat_shell.contracts import ChainMessage, TitleRequest, TurnFailed
from chat_shell.tools.registry import ToolRegistry
from tests.chat_shell.conftest import MakeShell
from tests.support.scripted_provider import ScriptedProvider, http_error, text, tool_call
from tests.support.telemetry import (
    EMERGENCY_WINDOW,
    Recorded,
    children,
    events_named,
    guard_without_summary,
    over_trigger_history,
    series,
)
from tests.support.texts import log_text
from tests.support.turns import collect, make_request

SECRET = "the vault code is 7-4-1-9"
# The model profile label of the turns below (the shell's default model).
GPT_4O = {"model_profile": "gpt-4o"}


@tool
async def lookup(topic: str) -> str:
    """Looks a topic up."""
    return f"notes about {topic}"


def _turn_span(recorded: Recorded, turn_id: int) -> Any:
    (span,) = [
        s
        for s in recorded.finished_spans()
        if s.name == "invoke_agent chat_shell" and s.attributes.get("chat_shell.turn.id") == turn_id
    ]
    return span


def _under(recorded: Recorded, parent: Any, name: str) -> list[Any]:
    """The finished spans named `name` whose parent is `parent`."""
    return [s for s in children(recorded.finished_spans(), parent) if s.name == name]


async def test_a_turn_is_one_span_with_a_genai_span_per_model_call_and_a_span_per_tool_call(
    telemetry: Recorded, scripted_provider: ScriptedProvider, make_shell: MakeShell
) -> None:
    shell = make_shell(tools=ToolRegistry([lookup]))
    scripted_provider.script(tool_call("lookup", {"topic": "kyoto"}), text("Here is what I found."))
    await collect(shell, make_request(101, SECRET, conversation_id=7))

    spans = telemetry.finished_spans()
    turn = _turn_span(telemetry, 101)
    assert turn.attributes["gen_ai.conversation.id"] == "7"
    assert turn.attributes["chat_shell.termination_reason"] == "normal_completion"
    assert turn.attributes["chat_shell.model_calls"] == 2
    calls = [s for s in children(spans, turn) if s.name == "chat gpt-4o"]
    tools = [s for s in children(spans, turn) if s.name == "execute_tool lookup"]
    assert len(calls) == 2 and len(tools) == 1
    for call in calls:
        assert call.attributes["gen_ai.operation.name"] == "chat"
        assert call.attributes["gen_ai.request.model"] == "gpt-4o"
        assert call.attributes["gen_ai.usage.input_tokens"] > 0
        assert call.attributes["gen_ai.usage.output_tokens"] > 0
    assert [c.attributes["gen_ai.response.finish_reasons"] for c in calls] == [("tool_calls",), ("stop",)]
    assert tools[0].attributes["gen_ai.tool.name"] == "lookup"
    assert tools[0].attributes["gen_ai.tool.call.id"]
    assert turn.attributes["gen_ai.usage.input_tokens"] == sum(
        c.attributes["gen_ai.usage.input_tokens"] for c in calls
    )
    # No message content in any span of the turn.
    for span in [turn, *children(spans, turn)]:
        assert not any(SECRET in str(value) for value in span.attributes.values())


async def test_turn_metrics_count_the_outcome_calls_tokens_utilisation_and_time_to_first_token(
    telemetry: Recorded, scripted_provider: ScriptedProvider, make_shell: MakeShell
) -> None:
    tally = telemetry.tally(
        turns=series("chat_shell.turns", termination_reason="normal_completion", **GPT_4O),
        calls=series("chat_shell.model.calls", outcome="ok", purpose="answer", **GPT_4O),
        input=series("chat_shell.model.input_tokens", **GPT_4O),
        output=series("chat_shell.model.output_tokens", **GPT_4O),
        utilisation=series("chat_shell.context.utilization", **GPT_4O),
        ttft=series("chat_shell.time_to_first_token", **GPT_4O),
    )
    shell = make_shell(tools=ToolRegistry([lookup]))
    scripted_provider.script(tool_call("lookup", {"topic": "tea"}), text("Done."))
    events = await collect(shell, make_request(102, "hello"))
    usage = events[-1].result.usage  # type: ignore[union-attr]

    assert tally.grown() == {
        "turns": 1,
        "calls": 2,
        "input": usage.input_tokens,
        "output": usage.output_tokens,
        # One value per turn (not per model call), the meter's used over available input.
        "utilisation": 1,
        "ttft": 1,
    }


async def test_a_model_name_a_user_typed_is_never_a_metric_label(
    telemetry: Recorded, scripted_provider: ScriptedProvider, make_shell: MakeShell
) -> None:
    shell = make_shell()
    await collect(shell, make_request(103, "hi", model="gpt-4o-2024-08-06"))
    await collect(shell, make_request(104, "hi", model="my-private-model-xyz"))
    profiles = {attributes.get("model_profile") for attributes, _ in telemetry.points("chat_shell.turns")}
    assert "gpt-4o-2024-08-06" not in profiles and "my-private-model-xyz" not in profiles
    assert "other" in profiles
    for name in ("chat_shell.turns", "chat_shell.model.calls", "chat_shell.model.input_tokens"):
        for attributes, _ in telemetry.points(name):
            assert set(attributes) <= {"model_profile", "termination_reason", "purpose", "outcome"}


async def test_a_stopped_turn_ends_its_model_call_span_as_cancelled(
    telemetry: Recorded, scripted_provider: ScriptedProvider, make_shell: MakeShell
) -> None:
    tally = telemetry.tally(cancelled=series("chat_shell.model.calls", outcome="cancelled", purpose="answer"))
    scripted_provider.script(text("one two three four five six seven eight", token_delay=0.1))
    stop = asyncio.Event()
    async for event in make_shell().run(make_request(111, "Count slowly."), stop):
        if event.type == "message.delta":
            stop.set()

    turn = _turn_span(telemetry, 111)
    (call,) = _under(telemetry, turn, "chat gpt-4o")
    assert call.attributes["error.type"] == "cancelled"
    assert call.status.status_code.name != "ERROR"
    assert tally.grown() == {"cancelled": 1}


async def test_a_refused_turn_counts_a_refusal_and_its_span_says_why(
    telemetry: Recorded, scripted_provider: ScriptedProvider, make_shell: MakeShell
) -> None:
    tally = telemetry.tally(
        refusals=series("chat_shell.refusals", **GPT_4O),
        turns=series("chat_shell.turns", termination_reason="context_refused", **GPT_4O),
    )
    shell = make_shell(context_window=8192, max_output_tokens=1024)
    events = await collect(shell, make_request(105, log_text(60_000)))

    assert isinstance(events[-1], TurnFailed) and events[-1].code == "context_refused"
    assert scripted_provider.requests == []
    assert tally.grown() == {"refusals": 1, "turns": 1}
    turn = _turn_span(telemetry, 105)
    assert turn.status.status_code.name == "ERROR"
    assert turn.attributes["error.type"] == "context_refused"
    assert turn.attributes["chat_shell.context.state"] == "refused"


async def test_a_provider_overflow_is_counted_and_its_model_call_span_failed(
    telemetry: Recorded, scripted_provider: ScriptedProvider, make_shell: MakeShell
) -> None:
    tally = telemetry.tally(
        overflows=series("chat_shell.provider.overflow_errors", **GPT_4O),
        failed_calls=series("chat_shell.model.calls", outcome="error", **GPT_4O),
    )
    scripted_provider.context_window = 50  # every request is too long for the provider
    events = await collect(make_shell(), make_request(106, "a question that does not fit"))

    assert events[-1].type == "turn.failed"
    grown = tally.grown()
    assert grown["overflows"] >= 1
    assert grown["failed_calls"] >= 1
    turn = _turn_span(telemetry, 106)
    failed = _under(telemetry, turn, "chat gpt-4o")
    assert failed and all(s.status.status_code.name == "ERROR" for s in failed)
    assert {s.attributes["error.type"] for s in failed} == {"context_overflow"}


async def test_an_emergency_truncation_is_a_compaction_span_with_the_source_stage_events(
    telemetry: Recorded, scripted_provider: ScriptedProvider, make_shell: MakeShell
) -> None:
    strategy = {"strategy": "emergency_truncate"}
    tally = telemetry.tally(
        compactions=series("chat_shell.compactions", status="completed", **strategy, **GPT_4O),
        truncations=series("chat_shell.emergency_truncations", **GPT_4O),
        saved=series("chat_shell.compaction.tokens_saved", **strategy, **GPT_4O),
        durations=series("chat_shell.compaction.duration", status="completed", **strategy, **GPT_4O),
    )
    scripted_provider.script(text("The logs show two failures."))
    shell = make_shell(**EMERGENCY_WINDOW, guard_factory=guard_without_summary)
    events = await collect(shell, make_request(107, "Summarize the errors.", history=over_trigger_history()))

    assert events[-1].type == "turn.completed"
    grown = tally.grown()
    assert grown.pop("saved") > 0
    assert grown == {"compactions": 1, "truncations": 1, "durations": 1}
    turn = _turn_span(telemetry, 107)
    (compaction,) = [s for s in children(telemetry.finished_spans(), turn) if s.name.startswith("compaction")]
    assert compaction.name == "compaction emergency_truncate"
    assert compaction.attributes["chat_shell.compaction.status"] == "completed"
    assert compaction.attributes["chat_shell.compaction.tokens_saved"] > 0
    emergency = [e for e in events_named(turn, "context_protection.tool_output") if e["emergency"]]
    (event,) = emergency
    assert event["status"] == "applied" and event["messages_truncated"] >= 1
    assert event["tokens_saved"] == event["before_tokens"] - event["after_tokens"] > 0


def _log_questions(pairs: int, chars: int) -> list[ChainMessage]:
    """Earlier turns: questions about long logs, each with a short answer."""
    history: list[ChainMessage] = []
    for index in range(pairs):
        history += [
            ChainMessage(role="user", content=f"Question {index}: {log_text(chars, seed=index)}"),
            ChainMessage(role="assistant", content=f"Answer {index}."),
        ]
    return history


async def test_a_completed_summary_compaction_is_a_span_event_and_counted(
    telemetry: Recorded, scripted_provider: ScriptedProvider, make_shell: MakeShell
) -> None:
    labels = {**GPT_4O, "strategy": "summary_compact"}
    tally = telemetry.tally(
        completed=series("chat_shell.compactions", status="completed", **labels),
        summary_calls=series("chat_shell.model.calls", purpose="summary", outcome="ok"),
    )
    history = _log_questions(12, 3_000)
    scripted_provider.script_summaries(text("Summary of earlier turns: twelve questions about logs."))
    scripted_provider.script(text("Done."))
    shell = make_shell(context_window=20_000, max_output_tokens=4_000)
    await collect(shell, make_request(108, "And now?", history=history))

    turn = _turn_span(telemetry, 108)
    # The summarizer's calls are model-call spans of the turn too, counted apart from answers.
    calls = _under(telemetry, turn, "chat gpt-4o")
    purposes = [call.attributes["chat_shell.call.purpose"] for call in calls]
    assert purposes.count("answer") == 1 and purposes.count("summary") >= 1
    assert tally.grown() == {"completed": 1, "summary_calls": purposes.count("summary")}
    (compaction,) = _under(telemetry, turn, "compaction summary_compact")
    assert compaction.attributes["chat_shell.compaction.tokens_saved"] > 0
    # The compactor's own span event, on the turn span that is current while it runs.
    (event,) = events_named(turn, "context_protection.summary_compact")
    assert event["status"] == "completed" and event["tokens_saved"] > 0


async def test_a_summary_compaction_fallback_is_counted_with_its_reason(
    telemetry: Recorded, scripted_provider: ScriptedProvider, make_shell: MakeShell
) -> None:
    labels = {**GPT_4O, "strategy": "summary_compact"}
    tally = telemetry.tally(fallbacks=series("chat_shell.compactions", status="fallback", **labels))
    history = _log_questions(12, 3_000)
    scripted_provider.script_summaries(http_error(500))
    scripted_provider.script(text("Done."))
    shell = make_shell(context_window=20_000, max_output_tokens=4_000)
    await collect(shell, make_request(109, "And now?", history=history))

    assert tally.grown() == {"fallbacks": 1}
    turn = _turn_span(telemetry, 109)
    (compaction,) = _under(telemetry, turn, "compaction summary_compact")
    assert compaction.status.status_code.name == "ERROR"
    assert compaction.attributes["chat_shell.compaction.failure_reason"]


async def test_an_overflow_retry_after_a_forced_compaction_is_counted(
    telemetry: Recorded, scripted_provider: ScriptedProvider, make_shell: MakeShell
) -> None:
    tally = telemetry.tally(
        overflows=series("chat_shell.provider.overflow_errors", **GPT_4O),
        completed=series("chat_shell.turns", termination_reason="normal_completion", **GPT_4O),
    )
    history = _log_questions(6, 2_000)
    # The provider counts the reply's max_tokens (16,384 for gpt-4o) against its window, so only
    # the first request (about 6,000 prompt tokens) overflows; the compacted retry fits.
    scripted_provider.context_window = 22_000
    scripted_provider.script_summaries(text("Summary of earlier turns: six questions."))
    scripted_provider.script(text("Done."))
    await collect(make_shell(), make_request(110, "And now?", history=history))

    # Every overflow answer counts, the summarizer's own included.
    assert scripted_provider.overflows_answered >= 1
    assert tally.grown() == {"overflows": scripted_provider.overflows_answered, "completed": 1}


async def test_a_title_call_is_its_own_span_and_counted_as_a_title(
    telemetry: Recorded, scripted_provider: ScriptedProvider, make_shell: MakeShell
) -> None:
    tally = telemetry.tally(
        titles=series("chat_shell.model.calls", purpose="title", outcome="ok"),
        failed=series("chat_shell.model.calls", purpose="title", outcome="error"),
    )
    scripted_provider.script_titles(text("Log questions"), http_error(400))
    shell = make_shell()
    # The recorder is shared by the worker's tests: this test's spans are those of its conversation.
    request = TitleRequest(conversation_id=770_077, model="gpt-4o", user_text="Why?", reply_text="Because.")
    assert await shell.write_title(request) == "Log questions"
    assert await shell.write_title(request) is None  # a failed call: no title, no exception
    assert tally.grown() == {"titles": 1, "failed": 1}
    spans = [
        s
        for s in telemetry.finished_spans()
        if s.name == "chat_shell.title" and s.attributes["gen_ai.conversation.id"] == "770077"
    ]
    assert len(spans) == 2
    calls = [s for span in spans for s in children(telemetry.finished_spans(), span)]
    assert [c.attributes["chat_shell.call.purpose"] for c in calls] == ["title", "title"]
