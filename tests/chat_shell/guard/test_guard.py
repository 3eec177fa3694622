"""UnifiedContextGuard as the pre-model hook: stages, state upserts, estimate, refusal, metrics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from itertools import pairwise

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from chat_shell.accounting.budget import budget_for
from chat_shell.accounting.text_counter import TiktokenText
from chat_shell.accounting.token_counter import TokenCounter
from chat_shell.agents.attempt_guidance import truncation_guidance
from chat_shell.contracts import CompactionRecord
from chat_shell.guard.context_guard import UnifiedContextGuard
from chat_shell.guard.protocol import ContextRefused, fixed_tools, guidance_message
from chat_shell.guard.stages.source import SourceContext
from chat_shell.guard.stages.summary_compaction.request import SummaryOutcome, SummaryRequest
from chat_shell.guard.stages.tool_output import ToolOutputSource, parse
from chat_shell.messages.markers import is_compacted, markers, with_markers
from chat_shell.providers.profiles import ModelProfile, resolve_profile
from tests.chat_shell.guard.helpers import Recorder, openai_shaped, step, tool_round
from tests.support.texts import log_text

GPT4O = resolve_profile("gpt-4o")
# 40k window, 4k max output: available 36,000, trigger 30,600, keep 16,200, tool budget 9,000.
SMALL = ModelProfile("small-test-model", 40_000, 4_000)
EXACT = TokenCounter(TiktokenText())


def text_of(tokens: int, seed: int = 1) -> str:
    """Log text of just under `tokens` cl100k tokens."""
    return EXACT.text.head(log_text(tokens * 3, seed=seed), tokens)


def opening(user: str = "Check the worker logs for errors, please.") -> list[BaseMessage]:
    return [
        SystemMessage("You are a careful operations assistant.", id="sys"),
        HumanMessage(user, id="user-1"),
    ]


def new_guard(profile: ModelProfile = GPT4O, **kwargs: object) -> tuple[UnifiedContextGuard, Recorder]:
    recorder = Recorder()
    guard = UnifiedContextGuard(profile, budget_for(profile), emit=recorder, **kwargs)  # type: ignore[arg-type]
    return guard, recorder


# ---------------------------------------------------------------------------- the hook contract


async def test_every_call_returns_the_model_input_and_writes_state_only_when_it_changed_something() -> None:
    guard, _ = new_guard()
    messages = opening()
    update, state = await step(guard, messages)
    assert update["llm_input_messages"] == messages
    assert "messages" not in update
    messages = [*state, *tool_round(1, "3 errors found")]
    update, _ = await step(guard, messages)
    assert update["llm_input_messages"] == messages  # returned again, never left stale
    assert all(a is b for a, b in zip(update["llm_input_messages"], messages, strict=True))
    assert "messages" not in update


async def test_a_200000_character_tool_output_reaches_the_model_compact_and_stays_whole_in_the_input() -> (
    None
):
    guard, recorder = new_guard()
    raw = log_text(200_000)
    assert len(raw) == 200_000
    _, state = await step(guard, opening())
    tool_result = tool_round(1, raw)
    messages = [*state, *tool_result]
    update, state = await step(guard, messages)

    shown = update["llm_input_messages"][-1]
    assert isinstance(shown, ToolMessage) and shown.id == "tool-1" and is_compacted(shown)
    assert EXACT.count_text(shown.text) <= 15_000
    parts = parse(shown.text)
    assert parts is not None and parts.total_tokens == EXACT.count_text(raw)
    # State gets the compact form by upsert (same id, same place), and nothing else.
    assert update["messages"] == [shown]
    assert [m.id for m in state] == ["sys", "user-1", "ai-1", "tool-1"] and state[-1] is shown
    # The raw output the runtime shows the user is untouched.
    assert tool_result[1].content == raw and not is_compacted(tool_result[1])
    assert recorder.metrics[-1].breakdown["tool_outputs"] < 15_100


async def test_a_compacted_output_is_not_rewritten_on_later_calls() -> None:
    guard, _ = new_guard()
    _, state = await step(guard, opening())
    update, state = await step(guard, [*state, *tool_round(1, log_text(200_000))])
    compact = state[-1]
    update, state = await step(guard, [*state, *tool_round(2, "ok")])
    assert "messages" not in update
    assert update["llm_input_messages"][3] is compact

    # A fresh guard on the stored history (next turn) leaves the compact form alone too.
    next_turn, _ = new_guard()
    update, _ = await step(
        next_turn, [*state, AIMessage("Done.", id="ai-3"), HumanMessage("thanks", id="user-2")]
    )
    assert "messages" not in update
    assert update["llm_input_messages"][3].content == compact.content


async def test_outputs_under_budget_are_passed_through_as_the_same_objects() -> None:
    guard, recorder = new_guard()
    _, state = await step(guard, opening())
    rounds = [*tool_round(1, text_of(14_000)), *tool_round(2, "")]
    update, _ = await step(guard, [*state, *rounds])
    assert "messages" not in update
    assert update["llm_input_messages"][-4:] == rounds
    assert all(a is b for a, b in zip(update["llm_input_messages"][-4:], rounds, strict=True))
    assert recorder.compactions == []


async def test_a_message_without_id_is_counted_and_compacted_in_the_model_input_only() -> None:
    guard, _ = new_guard()
    raw = log_text(200_000)
    nameless = ToolMessage(raw, tool_call_id="call-1", name="run_shell")
    messages = [
        *opening(),
        AIMessage("", id="ai-1", tool_calls=[{"id": "call-1", "name": "run_shell", "args": {}}]),
    ]
    messages.append(nameless)
    update, state = await step(guard, messages)
    assert "messages" not in update  # an upsert without id would append a duplicate
    shown = update["llm_input_messages"][-1]
    assert shown.id is None and is_compacted(shown) and EXACT.count_text(shown.text) <= 15_000
    update, _ = await step(guard, [*state, *tool_round(2, "ok")])
    assert update["llm_input_messages"][3] is shown  # rendered once, remembered
    assert nameless.content == raw


# ---------------------------------------------------------------------------- accounting


async def test_tool_schemas_and_both_tool_call_shapes_are_part_of_the_count() -> None:
    schemas = [
        {
            "type": "function",
            "function": {
                "name": "run_shell",
                "description": "Run a read-only shell command on the operations host. " * 20,
                "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
            },
        }
    ]
    guard, _ = new_guard(tools=fixed_tools(schemas))
    args = {"command": "journalctl -u worker --since -48h | grep -i error | tail -n 500"}
    lc = AIMessage("", id="ai-1", tool_calls=[{"id": "call-1", "name": "run_shell", "args": args}])
    openai = openai_shaped("ai-1", "call-1", "run_shell", str(args))
    result = ToolMessage("no errors", tool_call_id="call-1", id="tool-1")
    await step(guard, [*opening(), lc, result])
    with_lc = guard.final_metrics([*opening(), lc, result])
    other, _ = new_guard(tools=fixed_tools(schemas))
    with_openai = other.final_metrics([*opening(), openai, result])
    no_args, _ = new_guard(tools=fixed_tools(schemas))
    bare = no_args.final_metrics([*opening(), AIMessage("", id="ai-1"), result])

    assert with_lc.breakdown["tool_schemas"] == EXACT.count_tool_schemas(schemas) > 200
    assert (
        with_lc.calibration["local_tokens"] - bare.calibration["local_tokens"]
        >= EXACT.count_text(str(args)) - 5
    )
    assert abs(with_lc.calibration["local_tokens"] - with_openai.calibration["local_tokens"]) <= 5


async def test_the_breakdown_attributes_every_used_token_to_one_source() -> None:
    guard, recorder = new_guard(tools=fixed_tools([{"type": "function", "function": {"name": "f"}}]))
    history = [
        SystemMessage("You are a careful operations assistant. " * 30, id="sys"),
        HumanMessage("first question " * 40, id="user-1"),
        *tool_round(1, text_of(3_000)),
        AIMessage("an answer " * 50, id="ai-2"),
        HumanMessage("the current question", id="user-2"),
    ]
    await step(guard, history)
    metrics = recorder.metrics[-1]
    assert metrics.phase == "pre_turn"
    assert sum(metrics.breakdown.values()) == metrics.used_input
    local = {m.id: EXACT.count_message(m).tokens for m in history}
    assert metrics.breakdown["current_input"] == local["user-2"]
    assert metrics.breakdown["tool_outputs"] == local["tool-1"]
    assert metrics.breakdown["history"] == local["user-1"] + local["ai-1"] + local["ai-2"]
    # The system prompt with the reply priming; the configured fixed overhead on its own.
    assert metrics.breakdown["system"] == local["sys"] + 3
    assert metrics.breakdown["overhead"] == 4_000
    assert metrics.breakdown["tool_schemas"] > 0
    assert metrics.estimate_source == "configured"


async def test_a_provider_report_becomes_the_estimate_while_the_view_still_starts_with_that_request() -> None:
    guard, recorder = new_guard()
    _, state = await step(guard, opening())
    request_local = recorder.metrics[-1].calibration["local_tokens"]
    # The provider saw 30,000 more tokens than we counted (a hidden prompt, say).
    reported_input = request_local + 30_000
    _, state = await step(guard, [*state, *tool_round(1, "ok", provider_input=reported_input)])
    metrics = guard.final_metrics(state)
    added = sum(EXACT.count_message(m).tokens for m in state[2:])
    assert metrics.estimate_source == "reported"
    assert metrics.used_input == reported_input + added
    assert metrics.calibration["reported_tokens"] == reported_input + added


async def test_a_guard_rewrite_inside_the_reported_request_voids_the_report() -> None:
    guard, _ = new_guard(SMALL)
    _, state = await step(guard, [*opening(), *tool_round(1, text_of(8_500, seed=2))])
    local = guard.final_metrics(state).calibration["local_tokens"]
    report = tool_round(2, text_of(8_000, seed=3), provider_input=local + 10_000)
    update, state = await step(guard, [*state, *report])
    assert guard.final_metrics(state).estimate_source == "reported"
    # Another output pushes the reported estimate over the trigger: the emergency stage
    # re-truncates the largest output, which was part of the reported request.
    update, state = await step(guard, [*state, *tool_round(3, text_of(8_200, seed=4))])
    assert [m.id for m in update["messages"]] == ["tool-1"]
    metrics = guard.final_metrics(state)
    assert metrics.calibration["reported_tokens"] is None
    assert metrics.estimate_source == "configured"


async def test_calibration_samples_persisted_on_earlier_replies_feed_the_fit() -> None:
    def reply(i: int, local: int, provider: int, profile: str = "gpt-4o") -> AIMessage:
        message = AIMessage(f"answer {i}", id=f"old-ai-{i}")
        return with_markers(
            message, local_input_tokens=local, provider_input_tokens=provider, profile=profile
        )  # type: ignore[return-value]

    history: list[BaseMessage] = [SystemMessage("sys", id="sys")]
    for i, local in enumerate([2_000, 6_000, 12_000, 20_000]):
        history += [
            HumanMessage(f"question {i}", id=f"old-user-{i}"),
            reply(i, local, 11_066 + int(1.7479 * local)),
        ]
    history.append(reply(9, 100, 900_000, profile="another-model"))  # other profiles are ignored
    history.append(HumanMessage("next question", id="user-9"))
    guard, recorder = new_guard()
    await step(guard, history)
    metrics = recorder.metrics[-1]
    assert metrics.calibration["fitted"] is True and metrics.calibration["samples"] == 4
    assert abs(metrics.calibration["scale"] - 1.7479) < 0.01
    assert metrics.estimate_source == "calibrated"
    local = metrics.calibration["local_tokens"]
    assert abs(metrics.used_input - (11_066 + 1.7479 * local)) < 50


async def test_annotated_responses_carry_calibration_samples_and_counts_that_a_reload_trusts() -> None:
    guard, recorder = new_guard()
    _, state = await step(guard, opening())
    local = recorder.metrics[-1].calibration["local_tokens"]
    _, state = await step(guard, [*state, *tool_round(1, log_text(60_000), provider_input=local + 9_000)])
    second_local = guard._account._requests[-1].local
    final = [
        *state,
        AIMessage(
            "All clear.",
            id="ai-final",
            usage_metadata={"input_tokens": 22_222, "output_tokens": 3, "total_tokens": 22_225},
        ),
    ]
    annotated = guard.annotate_responses(final)

    assert [m.id for m in annotated] == [m.id for m in final]
    assert all(markers(m).token_count is not None for m in annotated)
    first_reply = markers(annotated[2])
    assert (first_reply.local_input_tokens, first_reply.provider_input_tokens) == (local, local + 9_000)
    assert first_reply.profile == "gpt-4o"
    last_reply = markers(annotated[-1])
    assert (last_reply.local_input_tokens, last_reply.provider_input_tokens) == (second_local, 22_222)
    assert markers(annotated[3]).local_input_tokens is None  # tool results carry no sample

    # Reload: new objects through JSON, as the stored chain comes back next turn.
    reloaded = [type(m).model_validate_json(m.model_dump_json()) for m in annotated]
    fresh, _ = new_guard()
    assert fresh.annotate_responses(reloaded) == reloaded
    assert all(a is b for a, b in zip(fresh.annotate_responses(reloaded), reloaded, strict=True))
    assert (
        fresh.final_metrics(reloaded).calibration["local_tokens"]
        == guard.final_metrics(final).calibration["local_tokens"]
    )
    # The persisted count is used as is: a doctored figure shows up in the total.
    doctored = list(reloaded)
    count = markers(doctored[3]).token_count
    assert count is not None
    doctored[3] = with_markers(
        doctored[3], token_count={**count.model_dump(), "tokens": count.tokens + 100_000}
    )
    other, _ = new_guard()
    assert (
        other.final_metrics(doctored).calibration["local_tokens"]
        == fresh.final_metrics(reloaded).calibration["local_tokens"] + 100_000
    )


# ---------------------------------------------------------------------------- emergency and refusal


async def test_the_emergency_stage_re_truncates_the_largest_outputs_first_and_stops_under_the_trigger() -> (
    None
):
    guard, recorder = new_guard(SMALL)
    sizes = [5_000, 8_600, 7_000, 8_800, 6_000]  # each under the 9,000 budget
    messages: list[BaseMessage] = opening()
    for i, size in enumerate(sizes, start=1):
        messages += tool_round(i, text_of(size, seed=i))
    update, _ = await step(guard, messages)

    rewritten = [m.id for m in update["messages"]]
    assert rewritten == ["tool-4", "tool-2"]  # largest first, no more than needed
    for message in update["messages"]:
        assert EXACT.count_text(message.text) <= 2_700 and is_compacted(message)
    metrics = recorder.metrics[-1]
    assert metrics.used_input <= 30_600
    assert metrics.state == "compacted"
    (record,) = guard.compactions
    assert record.strategy == "emergency_truncate" and record.status == "completed"
    assert record.removed_items == 2 and record.before_tokens > 30_600 >= record.after_tokens
    assert recorder.compactions[-1].record == record
    assert metrics.latest_compaction == record


async def test_force_compaction_shrinks_the_request_to_keep() -> None:
    messages: list[BaseMessage] = opening()
    for i, size in enumerate([8_000, 7_000, 6_000], start=1):
        messages += tool_round(i, text_of(size, seed=i))
    calm, _ = new_guard(SMALL)
    update, _ = await step(calm, messages)
    assert "messages" not in update  # 21k + overhead: under the trigger

    forced, recorder = new_guard(SMALL, force_compaction=True)
    update, state = await step(forced, messages)
    assert len(update["messages"]) >= 1
    assert recorder.metrics[-1].used_input <= 16_200
    update, _ = await step(forced, [*state, *tool_round(4, "ok")])
    assert "messages" not in update  # forced once, not on every call


async def test_a_latest_user_message_over_the_input_budget_is_refused_with_the_numbers() -> None:
    guard, recorder = new_guard(SMALL)
    huge = HumanMessage(text_of(37_000), id="user-1")
    with pytest.raises(ContextRefused) as refused:
        await step(guard, [SystemMessage("sys", id="sys"), huge])
    tokens = EXACT.count_message(huge).tokens
    assert refused.value.needed_tokens == tokens
    assert refused.value.available_tokens == 36_000
    assert f"about {tokens:,} tokens" in refused.value.message
    assert f"{tokens - 36_000:,} tokens too long" in refused.value.message
    assert recorder.metrics[-1].state == "refused"


async def test_a_request_that_cannot_fit_after_every_stage_is_refused() -> None:
    guard, recorder = new_guard(SMALL)
    system = SystemMessage(text_of(34_000), id="sys")
    with pytest.raises(ContextRefused) as refused:
        await step(guard, [system, HumanMessage("hi", id="user-1")])
    message = refused.value.message
    assert "too many even after compaction" in message and "system" in message
    assert refused.value.needed_tokens > 36_000 == refused.value.available_tokens
    assert recorder.metrics[-1].state == "refused" and recorder.metrics[-1].over_trigger


# ---------------------------------------------------------------------------- metrics and traces


async def test_metrics_are_emitted_per_5_percent_bucket_and_on_changes() -> None:
    guard, recorder = new_guard(SMALL)
    _, state = await step(guard, opening())
    calls = 40
    for i in range(1, calls):
        _, state = await step(guard, [*state, *tool_round(i, text_of(500, seed=i))])
    snapshots = recorder.metrics
    assert snapshots[0].phase == "pre_turn" and all(s.phase == "mid_turn" for s in snapshots[1:])
    assert 8 <= len(snapshots) < calls
    for previous, current in pairwise(snapshots):
        assert (
            int(previous.remaining_percent // 5) != int(current.remaining_percent // 5)
            or previous.state != current.state
            or previous.over_trigger != current.over_trigger
            or current.latest_compaction is not None
        )


async def test_a_tool_output_trace_event_is_recorded_only_when_something_was_cut() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    guard, _ = new_guard()
    with tracer.start_as_current_span("turn"):
        _, state = await step(guard, [*opening(), *tool_round(1, "small output")])
        _, state = await step(guard, [*state, *tool_round(2, log_text(200_000))])
        await step(guard, [*state, *tool_round(3, "another small output")])
    (span,) = exporter.get_finished_spans()
    events = [e for e in span.events if e.name.startswith("context_protection.")]
    assert [e.name for e in events] == ["context_protection.tool_output"]
    attributes = events[0].attributes or {}
    assert attributes["status"] == "applied"
    assert attributes["messages_truncated"] == 1 and attributes["emergency"] is False
    assert attributes["before_tokens"] > 40_000 > 15_010 > attributes["after_tokens"]
    assert attributes["tokens_saved"] == attributes["before_tokens"] - attributes["after_tokens"]
    assert attributes["duration_ms"] > 0


async def test_final_metrics_describe_the_final_state() -> None:
    guard, recorder = new_guard()
    _, state = await step(guard, opening())
    final = [*state, AIMessage("Here is the answer. " * 30, id="ai-final")]
    metrics = guard.final_metrics(final)
    assert metrics.phase == "final"
    assert metrics.used_input == recorder.metrics[-1].used_input + EXACT.count_message(final[-1]).tokens
    assert sum(metrics.breakdown.values()) == metrics.used_input
    assert len(recorder.metrics) == 1  # the final snapshot is returned, not emitted


# ---------------------------------------------------------------------------- pluggable stages


class PreviewSource:
    """A source that owns user messages with inline attachment text: it shortens that text and
    attributes the rest to `attachments`."""

    name = "inline_attachment"
    adds_content = False

    def applies_to(self, message: BaseMessage) -> bool:
        return isinstance(message, HumanMessage) and bool(markers(message).attachment_ids)

    async def prepare(self, messages: Sequence[BaseMessage], ctx: SourceContext) -> None:
        return None

    def render(
        self, message: BaseMessage, tokens: int, ctx: SourceContext, *, emergency: bool
    ) -> BaseMessage | None:
        text = message.text
        question, _, attachment = text.partition("\n[attachment]\n")
        if not attachment or attachment.startswith("[preview]"):
            return None
        preview = ctx.counter.text.head(attachment, 300)
        return message.model_copy(update={"content": f"{question}\n[attachment]\n[preview]{preview}"})

    def attribute(self, message: BaseMessage, tokens: int, ctx: SourceContext) -> Mapping[str, int]:
        _, _, attachment = message.text.partition("\n[attachment]\n")
        return {"attachments": ctx.counter.count_text(attachment)} if attachment else {}


async def test_a_source_may_transform_user_messages_and_claim_their_tokens() -> None:
    guard, recorder = new_guard(sources=[ToolOutputSource(), PreviewSource()])
    upload = with_markers(
        HumanMessage("What does this log say?\n[attachment]\n" + log_text(30_000), id="user-1"),
        attachment_ids=[7],
    )
    update, _ = await step(guard, [SystemMessage("sys", id="sys"), upload])
    (preview,) = update["messages"]
    assert preview.id == "user-1" and "[preview]" in preview.text
    metrics = recorder.metrics[-1]
    attachment_tokens = EXACT.count_text(preview.text.partition("\n[attachment]\n")[2])
    assert metrics.breakdown["attachments"] == attachment_tokens
    assert metrics.breakdown["current_input"] == EXACT.count_message(preview).tokens - attachment_tokens
    assert sum(metrics.breakdown.values()) == metrics.used_input


class KeepLatestTurn:
    """A summary stage that keeps the system prompt and the latest user turn."""

    def __init__(self) -> None:
        self.requests: list[SummaryRequest] = []

    async def __call__(self, request: SummaryRequest) -> SummaryOutcome:
        self.requests.append(request)
        messages = list(request.messages)
        latest = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
        summary = with_markers(
            SystemMessage("Summary of earlier turns: logs checked.", id="summary-1"),
            summary_compacted=True,
            summary_version=1,
        )
        kept = [m for m in messages if isinstance(m, SystemMessage)] + [summary, *messages[latest:]]
        record = CompactionRecord(
            status="completed", before_tokens=request.estimate.effective, created_at=datetime.now(UTC)
        )
        return SummaryOutcome(record=record, messages=kept)


async def test_a_summary_stage_runs_between_the_sources_and_the_emergency_stage() -> None:
    summarizer = KeepLatestTurn()
    guard, recorder = new_guard(SMALL, summary_compactor=summarizer)
    messages: list[BaseMessage] = opening()
    for i, size in enumerate([8_000, 8_000, 8_000, 5_000], start=1):
        messages += tool_round(i, text_of(size, seed=i))
    messages += [AIMessage("Found them.", id="ai-x"), HumanMessage("And the billing service?", id="user-2")]
    update, state = await step(guard, messages)

    (request,) = summarizer.requests
    assert request.estimate.effective > 30_600 and not request.forced
    assert request.message_tokens == [EXACT.count_message(m).tokens for m in request.messages]
    first = update["messages"][0]
    assert isinstance(first, RemoveMessage) and first.id == REMOVE_ALL_MESSAGES
    assert [m.id for m in update["llm_input_messages"]] == ["sys", "summary-1", "user-2"]
    assert [m.id for m in state] == ["sys", "summary-1", "user-2"]
    metrics = recorder.metrics[-1]
    assert metrics.state == "compacted" and metrics.breakdown["summary"] > 0
    assert guard.compactions[-1].status == "completed"
    update, _ = await step(guard, [*state, *tool_round(5, "ok")])
    assert "messages" not in update and len(summarizer.requests) == 1


def test_the_unknown_model_default_profile_is_labelled_in_metrics() -> None:
    guard, _ = new_guard(resolve_profile("my-private-model"))
    metrics = guard.final_metrics(opening())
    assert metrics.profile_source == "default" and metrics.profile == "my-private-model"


def test_configured_profiles_are_labelled_configured() -> None:
    profile = resolve_profile("gpt-4o", context_window=64_000)
    guard, _ = new_guard(replace(profile))
    assert guard.final_metrics(opening()).profile_source == "configured"


async def test_the_local_model_profile_compacts_with_the_cjk_aware_estimate() -> None:
    guard, recorder = new_guard(resolve_profile("smollm2-135m-instruct"))
    update, _ = await step(guard, [*opening("查一下日志"), *tool_round(1, log_text(200_000))])
    (compact,) = update["messages"]
    assert guard.counter.count_text(compact.text) <= guard.budget.tool_output_tokens == 896
    metrics = recorder.metrics[-1]
    assert metrics.used_input <= metrics.trigger and metrics.context_window == 4_096


async def test_attempt_guidance_is_counted_in_the_request_it_is_appended_to_and_only_there() -> None:
    guidance = truncation_guidance(1, 3)
    plain, plain_recorder = new_guard()
    guided, guided_recorder = new_guard(guidance=guidance)
    _, plain_state = await step(plain, opening())
    _, guided_state = await step(guided, opening())
    first = guided_recorder.metrics[-1].calibration["local_tokens"]
    assert first - plain_recorder.metrics[-1].calibration["local_tokens"] == (
        EXACT.count_message(guidance_message(guidance)).tokens
    )
    # The next call of the attempt comes after the model answered; the guidance is not resent.
    later = [*guided_state, *tool_round(1, "ok")]
    assert (
        guided.final_metrics(later).calibration["local_tokens"]
        == (plain.final_metrics([*plain_state, *tool_round(1, "ok")]).calibration["local_tokens"])
    )
