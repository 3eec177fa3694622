"""Summary compaction when the summarizer misbehaves: slow, hanging, failing, overflowing; and
at most one compaction per conversation at a time."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from chat_shell.accounting.budget import budget_for
from chat_shell.contracts import ChainMessage, ContextCompactionEvent, TurnCompleted, TurnEvent
from chat_shell.guard.context_guard import UnifiedContextGuard
from chat_shell.guard.stages.summary_compaction.compactor import SummaryCompactor
from chat_shell.guard.stages.summary_compaction.settings import CompactionSettings
from chat_shell.messages.convert import to_langchain
from chat_shell.messages.markers import is_summary, markers
from chat_shell.runtime import ChatShell
from tests.chat_shell.conftest import MakeShell
from tests.chat_shell.guard.helpers import step, tool_round
from tests.support.conversation import chinese_text
from tests.support.scripted_provider import (
    Reply,
    ScriptedProvider,
    content_text,
    context_length_error,
    count_prompt_tokens,
    http_error,
    text,
)
from tests.support.turns import collect, make_request

SMALL = {
    "trigger_tokens": 4_000,
    "keep_tokens": 2_000,
    "trim_tokens_to_summarize": 1_500,
    "summary_max_tokens": 200,
    "overhead_tokens": 100,
}


def long_history(pairs: int = 10) -> list[ChainMessage]:
    history: list[ChainMessage] = []
    for n in range(pairs):
        history.append(ChainMessage(role="user", content=f"Q{n} " + chinese_text(500, seed=n), id=f"u-{n}"))
        history.append(
            ChainMessage(role="assistant", content=f"A{n} " + chinese_text(300, seed=99 + n), id=f"a-{n}")
        )
    return history


def summary_events(events: list[TurnEvent]) -> list[ContextCompactionEvent]:
    return [
        e for e in events if isinstance(e, ContextCompactionEvent) and e.record.strategy == "summary_compact"
    ]


async def compacting_turn(shell: ChatShell) -> list[TurnEvent]:
    return await collect(shell, make_request(1, "What was my first question?", history=long_history()))


def small_shell(make_shell: MakeShell, **options: Any) -> ChatShell:
    return make_shell(profile_overrides={"gpt-4o": SMALL}, **options)


async def test_heartbeats_arrive_while_a_slow_summarizer_works(
    make_shell: MakeShell, scripted_provider: ScriptedProvider
) -> None:
    shell = small_shell(make_shell, compaction=CompactionSettings(heartbeat_seconds=0.1))
    scripted_provider.script_summaries(text("Summary one.", first_token_delay=0.6), text("Summary two."))
    events = await compacting_turn(shell)
    statuses = [e.record.status for e in summary_events(events)]
    assert statuses[0] == "started" and statuses[-1] == "completed"
    assert statuses.count("in_progress") >= 2
    assert isinstance(events[-1], TurnCompleted)


async def test_a_hanging_summarizer_times_out_into_the_fallback_and_the_emergency_stage(
    make_shell: MakeShell, scripted_provider: ScriptedProvider
) -> None:
    shell = small_shell(make_shell, compaction=CompactionSettings(summary_timeout_seconds=0.5))
    scripted_provider.script_summaries(Reply(hang=True))
    events = await compacting_turn(shell)
    (fallback,) = [e for e in summary_events(events) if e.record.status == "fallback"]
    assert fallback.record.failure_reason == "summarizer_timeout"
    assert isinstance(events[-1], TurnCompleted)
    result = events[-1].result
    assert [r.strategy for r in result.context_compactions] == ["summary_compact", "tail_drop"]
    # The emergency stage dropped the oldest history instead; the question is still asked.
    request = scripted_provider.chat_requests[-1]
    assert request["messages"][-1]["content"] == "What was my first question?"
    assert count_prompt_tokens(request) <= budget_for(shell.profile()).trigger


async def test_a_failing_summarizer_falls_back_and_the_turn_still_answers(
    make_shell: MakeShell, scripted_provider: ScriptedProvider
) -> None:
    shell = small_shell(make_shell)
    scripted_provider.script_summaries(http_error(500), http_error(500))
    events = await compacting_turn(shell)
    (fallback,) = [e for e in summary_events(events) if e.record.status == "fallback"]
    assert fallback.record.failure_reason == "summarizer_provider_unavailable"
    assert isinstance(events[-1], TurnCompleted)
    assert not any(e.metadata.summary_compacted for e in events[-1].result.messages_chain)


async def test_a_summarizer_request_the_provider_finds_too_long_is_split_once(
    make_shell: MakeShell, scripted_provider: ScriptedProvider
) -> None:
    shell = small_shell(make_shell)
    too_long = Reply(status=400, error_body=context_length_error(4_000, 5_000))
    scripted_provider.script_summaries(too_long)
    events = await compacting_turn(shell)
    assert summary_events(events)[-1].record.status == "completed"
    first, second, third = scripted_provider.summary_requests[:3]
    halves = [content_text(m) for m in (second["messages"][1], third["messages"][1])]
    assert len(halves[0]) < len(content_text(first["messages"][1]))

    scripted_provider.reset()
    scripted_provider.script_summaries(too_long, too_long)
    events = await compacting_turn(shell)
    fallback = summary_events(events)[-1]
    assert fallback.record.status == "fallback"
    assert fallback.record.failure_reason == "summarizer_context_overflow"
    assert isinstance(events[-1], TurnCompleted)


async def test_one_compaction_per_conversation_at_a_time(
    make_shell: MakeShell, scripted_provider: ScriptedProvider
) -> None:
    shell = small_shell(make_shell)
    profile = shell.profile()
    budget = budget_for(profile)

    def guard() -> UnifiedContextGuard:
        compactor = SummaryCompactor(shell.summarizer(profile, budget), conversation_id=7)
        return UnifiedContextGuard(profile, budget, emit=lambda _: None, summary_compactor=compactor)

    messages = [to_langchain(entry) for entry in long_history()]
    arrived = asyncio.Event()

    def hanging(body: dict[str, Any]) -> Reply:
        arrived.set()
        return Reply(text="First summary.", hang=True)

    scripted_provider.script_summaries(hanging)
    first = asyncio.create_task(guard()({"messages": messages}))
    second = asyncio.create_task(guard()({"messages": messages}))
    await arrived.wait()
    await asyncio.sleep(0.3)  # room for the second to send its request, were it not waiting
    assert len(scripted_provider.summary_requests) == 1  # the second waits for the first
    scripted_provider.close()  # the hanging summarizer answers
    updates = await asyncio.gather(first, second)
    assert all("messages" in update for update in updates)
    assert len(scripted_provider.summary_requests) >= 2


async def test_a_compaction_is_logged_traced_and_recorded_with_its_summary(
    make_shell: MakeShell, scripted_provider: ScriptedProvider, caplog: pytest.LogCaptureFixture
) -> None:
    shell = small_shell(make_shell)
    profile = shell.profile()
    scripted_provider.script_summaries(*[text("Budget 8000 EUR; order ORD-1; Q0..Q8 answered.")] * 20)
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    budget = budget_for(profile)
    compactor = SummaryCompactor(
        shell.summarizer(profile, budget), conversation_id=9, checkpoint_message_id=42
    )
    guard = UnifiedContextGuard(profile, budget, emit=lambda _: None, summary_compactor=compactor)
    history = [to_langchain(entry) for entry in long_history()]
    history[0] = history[0].model_copy(
        update={"content": "Budget 8000 EUR, order ORD-1. " + str(history[0].content)}
    )
    with caplog.at_level(logging.INFO), tracer_provider.get_tracer("test").start_as_current_span("turn"):
        update = await guard({"messages": [*history, HumanMessage("And now?", id="latest")]})
    (record,) = guard.compactions
    assert record.status == "completed" and record.checkpoint_message_id == 42
    assert record.summary_text and "ORD-1" in record.summary_text
    assert record.retention_score is not None and 0 < record.retention_score <= 1
    assert record.chunks and record.chunks >= 2 and record.removed_items
    assert record.before_tokens and record.after_tokens and record.after_tokens <= SMALL["keep_tokens"]
    summary = update["llm_input_messages"][0]
    assert is_summary(summary) and markers(summary).summary_version == 1
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("[SummaryCompact]")]
    assert [line.split("status=")[1].split()[0] for line in lines] == ["started", "completed"]
    (span,) = exporter.get_finished_spans()
    (event,) = [e for e in span.events if e.name == "context_protection.summary_compact"]
    attributes = event.attributes or {}
    assert attributes["status"] == "completed" and attributes["chunks"] == record.chunks
    assert attributes["tokens_saved"] == record.before_tokens - record.after_tokens


async def test_a_profile_with_compaction_switched_off_never_summarizes(
    make_shell: MakeShell, scripted_provider: ScriptedProvider
) -> None:
    shell = make_shell(profile_overrides={"gpt-4o": {**SMALL, "compaction_enabled": False}})
    events = await compacting_turn(shell)
    assert not scripted_provider.summary_requests and not summary_events(events)
    assert isinstance(events[-1], TurnCompleted)
    assert [r.strategy for r in events[-1].result.context_compactions] == ["tail_drop"]


async def test_a_failed_summary_is_not_retried_on_every_later_call_of_the_attempt(
    make_shell: MakeShell, scripted_provider: ScriptedProvider
) -> None:
    shell = small_shell(make_shell)
    profile = shell.profile()
    scripted_provider.script_summaries(*[http_error(503)] * 5)
    budget = budget_for(profile)
    compactor = SummaryCompactor(shell.summarizer(profile, budget), conversation_id=11)
    guard = UnifiedContextGuard(profile, budget, emit=lambda _: None, summary_compactor=compactor)
    state = [*[to_langchain(entry) for entry in long_history()], HumanMessage("Check the logs.", id="latest")]
    _, state = await step(guard, state)
    assert len(scripted_provider.summary_requests) == 1
    for round_ in range(1, 4):  # each tool round pushes the request over the trigger again
        _, state = await step(guard, [*state, *tool_round(round_, chinese_text(1_500, seed=round_))])
    assert len(scripted_provider.summary_requests) == 1
    strategies = [r.strategy for r in guard.compactions]
    assert strategies.count("summary_compact") == 1 and strategies.count("tail_drop") >= 2
