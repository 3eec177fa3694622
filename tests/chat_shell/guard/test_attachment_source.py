"""The attachment-preview source inside the guard (SPEC 5.2.2): user messages, current and
history, show bounded previews read through the package-mode reader over real uploads."""

from __future__ import annotations

import re
from base64 import b64encode
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from backend.settings import Settings
from chat_shell.accounting.budget import budget_for
from chat_shell.accounting.token_counter import TokenCounter
from chat_shell.guard.context_guard import UnifiedContextGuard
from chat_shell.guard.factory import build_guard
from chat_shell.guard.protocol import GuardContext, fixed_tools
from chat_shell.guard.stages.attachment_preview.block import Shown, preview_parts
from chat_shell.messages.convert import to_chain, to_langchain
from chat_shell.messages.markers import markers, with_markers
from chat_shell.providers.profiles import ModelProfile, resolve_profile
from tests.chat_shell.guard.helpers import Recorder, step, tool_round
from tests.support.attachments import AttachmentWorld, attachment_world, count_tokens
from tests.support.files import PNG_1X1, log_bytes, thirty_page_pdf

GPT4O = resolve_profile("gpt-4o")
# 40k window: available 36,000, trigger 30,600, attachment budget 9,000 (a quarter of available).
SMALL = ModelProfile("small-test-model", 40_000, 4_000)
OPENINGS = re.compile(r"<attachments count=")


@pytest.fixture
async def world(sqlite_url: str, make_settings: Callable[..., Settings]) -> AsyncIterator[AttachmentWorld]:
    async with attachment_world(make_settings(sqlite_url)) as made:
        yield made


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter


def new_guard(
    world: AttachmentWorld, profile: ModelProfile = GPT4O, *, with_reader: bool = True
) -> tuple[UnifiedContextGuard, Recorder]:
    recorder = Recorder()
    context = GuardContext(
        profile=profile,
        budget=budget_for(profile),
        counter=TokenCounter.for_profile(profile),
        conversation_id=world.conversation_id,
        turn_id=1,
        tools=fixed_tools(),
        emit=recorder,
        attachments=world.reader if with_reader else None,
    )
    return build_guard(context), recorder


def user(text: str, message_id: str, *attachment_ids: int) -> BaseMessage:
    return with_markers(HumanMessage(text, id=message_id), attachment_ids=list(attachment_ids))


def block_of(message: BaseMessage) -> str:
    parts = preview_parts(message)
    assert parts is not None and parts.block is not None, message
    return parts.block


async def test_current_and_history_messages_show_bounded_previews_as_same_id_upserts(
    world: AttachmentWorld,
) -> None:
    log = await world.attach("server.log", log_bytes(400_000, seed=3))
    pdf = await world.attach("report.pdf", thirty_page_pdf())
    note = await world.attach("note.txt", b"ship on Friday\n")
    history = user("What went wrong in this log?", "u-1", log)
    current = user("Compare the report with my note.", "u-3", pdf, note)
    messages = [
        SystemMessage("sys", id="sys"),
        history,
        AIMessage("Timeouts.", id="a-2"),
        current,
    ]
    guard, recorder = new_guard(world)
    update, state = await step(guard, messages)

    assert [m.id for m in update["messages"]] == ["u-1", "u-3"]
    budget = budget_for(GPT4O).attachment_preview_tokens
    shown = {m.id: m for m in update["llm_input_messages"]}
    for message_id, question in [
        ("u-1", "What went wrong in this log?"),
        ("u-3", "Compare the report with my note."),
    ]:
        block = block_of(shown[message_id])
        assert count_tokens(block) <= budget
        assert preview_parts(shown[message_id]) == Shown(block, (), question)
        assert markers(shown[message_id]).attachment_preview is True
        assert state[[m.id for m in state].index(message_id)] is shown[message_id]  # state holds the preview
    assert "Truncated: yes" in block_of(shown["u-1"]) and "read_attachment(attachment_id=" in block_of(
        shown["u-1"]
    )
    assert "ship on Friday" in block_of(shown["u-3"]) and "PAGE-MARKER-015" not in block_of(shown["u-3"])
    assert len(str(shown["u-1"].content)) < 100_000  # a preview, not the 400 kB log

    metrics = recorder.metrics[-1]
    assert metrics.breakdown["attachments"] == count_tokens(block_of(shown["u-1"])) + count_tokens(
        block_of(shown["u-3"])
    )
    assert sum(metrics.breakdown.values()) == metrics.used_input

    # Later hook calls of the turn leave the previews alone: nothing is rendered twice.
    update, state = await step(guard, [*state, *tool_round(1, "ok")])
    assert "messages" not in update
    assert [len(OPENINGS.findall(str(m.content))) for m in state if isinstance(m, HumanMessage)] == [1, 1]


async def test_previews_are_deterministic_and_a_reloaded_preview_is_kept_as_it_is(
    world: AttachmentWorld,
) -> None:
    ids = [
        await world.attach("a.log", log_bytes(300_000, seed=5)),
        await world.attach("b.pdf", thirty_page_pdf()),
    ]
    messages = [SystemMessage("sys", id="sys"), user("look", "u-1", *ids)]
    first, _ = new_guard(world)
    second, _ = new_guard(world)
    one = (await first({"messages": messages}))["llm_input_messages"]
    two = (await second({"messages": messages}))["llm_input_messages"]
    assert str(one[1].content).encode() == str(two[1].content).encode()

    # A checkpoint that already carries the preview is shown as it is, not previewed again.
    reloaded, _ = new_guard(world)
    update = await reloaded({"messages": [messages[0], one[1]]})
    assert "messages" not in update and update["llm_input_messages"][1] is one[1]


async def test_a_checkpointed_picture_is_shown_again_not_its_placeholder(world: AttachmentWorld) -> None:
    image = await world.attach("dot.png", PNG_1X1)
    seer = replace(GPT4O, accepts_images=True)
    guard, _ = new_guard(world, seer)
    shown = (await guard({"messages": [user("what is it?", "u-1", image)]}))["llm_input_messages"][0]
    picture = {
        "type": "image_url",
        "image_url": {"url": f"data:image/png;base64,{b64encode(PNG_1X1).decode()}"},
    }
    assert preview_parts(shown) == Shown(
        block_of(shown), (picture,), [{"type": "text", "text": "what is it?"}]
    )
    # A chain stores the picture as a text placeholder; the next turn shows the picture again.
    stored = to_langchain(to_chain(shown))
    assert "base64" not in str(stored.content)
    again, _ = new_guard(world, seer)
    (restored,) = (await again({"messages": [stored]}))["messages"]
    assert restored.content == shown.content
    # The same message on the same turn is left as it is.
    kept, _ = new_guard(world, seer)
    assert "messages" not in await kept({"messages": [shown]})


async def test_a_stale_preview_is_replaced_never_nested(world: AttachmentWorld) -> None:
    kept = await world.attach("kept.txt", b"kept text\n")
    gone = await world.attach("gone.log", log_bytes(200_000, seed=9))
    guard, _ = new_guard(world)
    shown = (await guard({"messages": [user("both files", "u-1", kept, gone)]}))["llm_input_messages"][0]
    assert (await world.client.delete(f"/api/attachments/{gone}")).status_code == 204

    later, _ = new_guard(world)
    update = await later({"messages": [shown]})
    (replaced,) = update["messages"]
    block = block_of(replaced)
    assert len(OPENINGS.findall(str(replaced.content))) == 1
    assert preview_parts(replaced) == Shown(block, (), "both files")
    assert "kept text" in block and f"ID: {gone} | unavailable" in block and "ERROR" not in block


async def test_a_trace_event_is_recorded_only_when_a_preview_left_text_out(
    world: AttachmentWorld, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    small = await world.attach("small.txt", b"short note\n")
    big = await world.attach("big.log", log_bytes(300_000, seed=4))
    guard, _ = new_guard(world)
    with provider.get_tracer("test").start_as_current_span("turn"):
        _, state = await step(guard, [SystemMessage("sys", id="sys"), user("read it", "u-1", small)])
        _, state = await step(guard, [*state, AIMessage("done", id="a-2"), user("and this", "u-3", big)])
    (span,) = exporter.get_finished_spans()
    events = [e for e in span.events if e.name.startswith("context_protection.")]
    assert [e.name for e in events] == ["context_protection.attachment_preview"]
    attributes = dict(events[0].attributes or {})
    assert attributes["status"] == "applied" and attributes["messages"] == 1
    assert attributes["attachments_truncated"] == 1
    assert attributes["before_tokens"] > attributes["after_tokens"] > 0
    assert attributes["tokens_saved"] == attributes["before_tokens"] - attributes["after_tokens"]


async def test_the_emergency_stage_shrinks_the_largest_previews_to_the_stricter_policy(
    world: AttachmentWorld,
) -> None:
    messages: list[BaseMessage] = [SystemMessage("sys", id="sys")]
    for n in range(1, 6):
        ident = await world.attach(f"part-{n}.log", log_bytes(150_000, seed=n))
        messages += [user(f"log {n}", f"u-{n}", ident), AIMessage(f"read {n}", id=f"a-{n}")]
    messages.append(HumanMessage("Summarize all five.", id="u-last"))
    guard, recorder = new_guard(world, SMALL)
    budget = budget_for(SMALL)
    update, state = await step(guard, messages)

    shown = [m for m in update["llm_input_messages"] if markers(m).attachment_ids]
    sizes = [count_tokens(block_of(m)) for m in shown]
    assert all(size <= budget.attachment_preview_tokens for size in sizes)
    stricter = [size for size in sizes if size <= int(budget.attachment_preview_tokens * 0.3)]
    assert stricter and len(stricter) < len(sizes)  # only as many as needed
    assert recorder.metrics[-1].used_input <= budget.trigger
    assert guard.compactions[-1].strategy == "emergency_truncate"
    assert all(len(OPENINGS.findall(str(m.content))) == 1 for m in shown)
    # The next call keeps the stricter previews: no flip-flopping back to the normal policy.
    update, _ = await step(guard, [*state, *tool_round(1, "ok")])
    assert "messages" not in update


async def test_without_a_reader_the_model_is_told_the_attachments_are_unavailable(
    world: AttachmentWorld,
) -> None:
    guard, _ = new_guard(world, with_reader=False)
    update = await guard({"messages": [user("see file", "u-1", 41)]})
    block = block_of(update["llm_input_messages"][0])
    assert "ID: 41 | unavailable" in block and "no attachment reader" in block
