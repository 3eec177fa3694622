"""The compact form of over-budget tool outputs (SPEC 5.2.1)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import replace

import pytest
from langchain_core.messages import ToolMessage

from chat_shell.accounting.budget import budget_for
from chat_shell.accounting.token_counter import IMAGE_PART_TOKENS, TOKENS_PER_MESSAGE, TokenCounter
from chat_shell.guard.stages.source import SourceContext
from chat_shell.guard.stages.tool_output import ToolOutputSource, parse
from chat_shell.messages.markers import is_compacted, markers
from chat_shell.messages.tool_images import images_label, tool_result_content
from chat_shell.providers.profiles import LOCAL_MODEL_NAME, ModelProfile, resolve_profile
from chat_shell.sizes import byte_size
from tests.support.files import PNG_1X1
from tests.support.texts import (
    binaryish_text,
    grapheme_boundaries,
    json_single_line,
    log_text,
    mixed_script_text,
)

SOURCE = ToolOutputSource()


def context(profile: ModelProfile | None = None) -> SourceContext:
    profile = profile or resolve_profile("gpt-4o")
    return SourceContext(counter=TokenCounter.for_profile(profile), budget=budget_for(profile))


def render(message: ToolMessage, ctx: SourceContext, *, emergency: bool = False) -> ToolMessage | None:
    tokens = ctx.counter.count_message(message).tokens
    rendered = SOURCE.render(message, tokens, ctx, emergency=emergency)
    assert rendered is None or isinstance(rendered, ToolMessage)
    return rendered


def tool(content: str | list, *, name: str = "run_shell", artifact: object = None) -> ToolMessage:
    return ToolMessage(content, tool_call_id="call_1", name=name, id="tool-1", artifact=artifact)


def test_outputs_within_budget_are_left_untouched() -> None:
    ctx = context()
    at_budget = ctx.counter.text.head(log_text(60_000), 15_000)
    assert 14_900 < ctx.counter.count_text(at_budget) <= 15_000
    assert render(tool(at_budget), ctx) is None
    assert render(tool(""), ctx) is None
    over = at_budget + "\n" + log_text(300)
    assert ctx.counter.count_text(over) > 15_000
    assert render(tool(over), ctx) is not None


def test_an_over_budget_output_becomes_a_compact_form_within_budget() -> None:
    ctx = context()
    raw = log_text(200_000)
    message = tool(raw, artifact={"exit_code": 2, "wall_time_s": 1.25})
    compact = render(message, ctx)
    assert compact is not None
    text = compact.text
    total = ctx.counter.count_text(raw)
    assert ctx.counter.count_text(text) <= 15_000
    header = text.split("\n", 1)[0]
    parts = parse(text)
    assert parts is not None
    kept = ctx.counter.count_text(parts.head) + ctx.counter.count_text(parts.tail)
    cut = total - kept
    assert (
        header
        == f"[tool_output name=run_shell total_tokens={total} kept_tokens={kept} truncated_tokens={cut}]"
    )
    assert kept > 14_000  # the budget is used, not wasted
    assert raw.startswith(parts.head) and raw.endswith(parts.tail)
    assert 0.55 < ctx.counter.count_text(parts.head) / kept < 0.65  # head 60%, tail 40%
    assert f"\n[… {total - kept} tokens truncated …]\n" in text
    assert parts.footer == "[exit_code=2 wall_time=1.2s]"
    assert text.endswith(
        "call run_shell again with narrower arguments: a filter, a range or a smaller limit.]"
    )
    # Same id and type, marked, the raw message object untouched.
    assert (compact.id, compact.tool_call_id, compact.name) == ("tool-1", "call_1", "run_shell")
    assert is_compacted(compact) and markers(compact).token_count is None
    assert message.content == raw and not is_compacted(message)


def test_re_rendering_is_idempotent_and_stricter_policies_recut_without_nesting() -> None:
    ctx = context()
    raw = log_text(200_000)
    total = ctx.counter.count_text(raw)
    compact = render(tool(raw), ctx)
    assert compact is not None
    assert render(compact, ctx) is None  # same policy: nothing to do

    emergency = render(compact, ctx, emergency=True)
    assert emergency is not None
    assert ctx.counter.count_text(emergency.text) <= int(15_000 * 0.3)
    assert emergency.text.count("[tool_output ") == 1 and emergency.text.count("[hint: ") == 1
    parts = parse(emergency.text)
    assert parts is not None and parts.total_tokens == total  # still the original output's size
    assert raw.startswith(parts.head) and raw.endswith(parts.tail)
    assert render(emergency, ctx, emergency=True) is None
    assert render(emergency, ctx) is None  # a looser policy cannot restore text


def test_an_emergency_render_of_a_raw_output_cuts_to_thirty_percent() -> None:
    ctx = context()
    raw = log_text(28_000)  # under the normal budget
    assert render(tool(raw), ctx) is None
    emergency = render(tool(raw), ctx, emergency=True)
    assert emergency is not None
    assert ctx.counter.count_text(emergency.text) <= 4_500


def test_per_tool_overrides_apply_to_that_tool_only() -> None:
    profile = replace(resolve_profile("gpt-4o"), tool_output_overrides={"run_shell": 500})
    ctx = context(profile)
    raw = log_text(8_000)
    shell = render(tool(raw, name="run_shell"), ctx)
    assert shell is not None and ctx.counter.count_text(shell.text) <= 500
    assert render(tool(raw, name="search_web"), ctx) is None


def test_list_content_becomes_json_with_image_placeholders_never_a_python_repr() -> None:
    ctx = context()
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "QUJD" * 50_000}}
    content = [{"type": "text", "text": log_text(120_000)}, image, {"type": "text", "text": "end of results"}]
    compact = render(tool(content), ctx)
    assert compact is not None
    text = compact.text
    assert "QUJDQUJD" not in text and "{'type'" not in text
    parts = parse(text)
    assert parts is not None
    assert parts.head.startswith('[{"type": "text", "text": "2026-11-')
    # The same line as a small result's, before the model's own reason is known.
    placeholder = (
        '{"type": "text", "text": "[image image/png 146.5 KB: not shown, '
        'its data is not a PNG, JPEG, GIF or WebP image]"}'
    )
    assert parts.tail.endswith(f'{placeholder}, {{"type": "text", "text": "end of results"}}]')
    # A small result with a picture: a model without image input gets its placeholder instead.
    shown = render(tool([{"type": "text", "text": "ok"}, image]), ctx)
    assert shown is not None and shown.content == (
        "ok\n[image image/png 146.5 KB: not shown, this model does not take images]"
    )


@pytest.mark.parametrize(
    ("make", "chars"),
    [(binaryish_text, 150_000), (json_single_line, 5_000_000)],
    ids=["binary-ish", "5-mb-single-line"],
)
def test_awkward_outputs_are_cut_to_budget_keeping_their_head_and_tail(
    make: Callable[[int], str], chars: int
) -> None:
    raw = make(chars)
    ctx = context()
    compact = render(tool(raw), ctx)
    assert compact is not None
    parts = parse(compact.text)
    assert parts is not None and raw.startswith(parts.head) and raw.endswith(parts.tail)
    assert ctx.counter.count_text(compact.text) <= 15_000


def test_special_token_text_survives_compaction_as_text() -> None:
    ctx = context()
    raw = "<|endoftext|> starts the log\n" + log_text(150_000) + "\nends <|endoftext|>"
    compact = render(tool(raw), ctx)
    assert compact is not None
    assert compact.text.count("<|endoftext|>") == 2


@pytest.mark.parametrize("model", ["gpt-4o", LOCAL_MODEL_NAME])
def test_mixed_cjk_emoji_and_rtl_text_is_never_cut_inside_a_character(model: str) -> None:
    ctx = context(resolve_profile(model))
    raw = mixed_script_text(120_000)
    compact = render(tool(raw), ctx)
    assert compact is not None
    parts = parse(compact.text)
    assert parts is not None
    bounds = grapheme_boundaries(raw)
    assert raw.startswith(parts.head) and len(parts.head) in bounds
    assert raw.endswith(parts.tail) and len(raw) - len(parts.tail) in bounds
    assert ctx.counter.count_text(compact.text) <= ctx.budget.tool_output_tokens


def test_a_tail_that_looks_like_a_footer_round_trips() -> None:
    ctx = context()
    raw = log_text(100_000) + "\n[exit_code=3]"
    compact = render(tool(raw), ctx)
    assert compact is not None
    assert render(compact, ctx) is None
    emergency = render(compact, ctx, emergency=True)
    assert emergency is not None and emergency.text.count("[tool_output ") == 1


def test_header_names_are_sanitized() -> None:
    ctx = context()
    compact = render(tool(log_text(100_000), name="my tool]\tv2"), ctx)
    assert compact is not None
    assert compact.text.startswith("[tool_output name=my_tool_v2 total_tokens=")
    nameless = render(ToolMessage(log_text(100_000), tool_call_id="c", id="t"), ctx)
    assert nameless is not None and nameless.text.startswith("[tool_output name=unknown ")


def test_json_outputs_keep_their_structure_readable() -> None:
    ctx = context()
    raw = json.dumps({"results": [{"id": i, "title": "标题 " * 5} for i in range(6_000)]}, ensure_ascii=False)
    compact = render(tool(raw, name="query_db"), ctx)
    assert compact is not None
    parts = parse(compact.text)
    assert parts is not None and parts.head.startswith('{"results": [{"id": 0')


# -- pictures in tool results (chat_shell.messages.tool_images) ---------------------------------

PICTURES = ToolOutputSource(images=True)


def _with_pictures(text: str, count: int) -> ToolMessage:
    """A tool result as the tool boundary shapes it: `text` and `count` distinct small PNGs."""
    pictures = [base64.b64encode(PNG_1X1 + bytes([n])).decode() for n in range(count)]
    content = tool_result_content(
        [
            {"type": "text", "text": text},
            *({"type": "image", "base64": b64, "mime_type": "image/png"} for b64 in pictures),
        ]
    )
    assert isinstance(content, list) and content[0]["text"].endswith(
        f"[image image/png {byte_size(len(PNG_1X1) + 1)}]"
    )
    return tool(content)


def _render_pictures(
    message: ToolMessage, ctx: SourceContext, *, emergency: bool = False
) -> ToolMessage | None:
    tokens = ctx.counter.count_message(message).tokens
    rendered = PICTURES.render(message, tokens, ctx, emergency=emergency)
    assert rendered is None or isinstance(rendered, ToolMessage)
    return rendered


def _pictures_of(message: ToolMessage) -> list:
    return [p for p in message.content if isinstance(p, dict) and p["type"] == "image_url"]


def test_pictures_are_counted_as_sent_and_a_result_within_budget_is_left_alone() -> None:
    ctx = context()
    message = _with_pictures("dashboard", 2)
    assert _render_pictures(message, ctx) is None
    plain = tool(message.content[0]["text"])
    label = ctx.counter.count_text(images_label("call_1"))
    # Each picture at its per-image cost, plus the user message that carries them and its label.
    assert ctx.counter.count_message(message).tokens == (
        ctx.counter.count_message(plain).tokens + 2 * IMAGE_PART_TOKENS + TOKENS_PER_MESSAGE + label
    )


def test_pictures_past_half_the_budget_keep_only_their_placeholder_with_the_reason() -> None:
    ctx = context()  # 15,000 tokens per tool output: nine pictures at most
    shown = _render_pictures(_with_pictures("dashboard", 12), ctx)
    assert shown is not None and is_compacted(shown)
    assert len(_pictures_of(shown)) == 9
    lines = shown.content[0]["text"].splitlines()
    assert lines[0] == "dashboard" and len(lines) == 13
    assert all(line.endswith("]") and "not shown" not in line for line in lines[1:10])
    assert all(
        line.endswith("not shown, the tool output budget holds 9 of its 12 images]") for line in lines[10:]
    )
    assert _render_pictures(shown, ctx) is None  # a fixed point: run again, nothing changes
    stricter = _render_pictures(shown, ctx, emergency=True)  # 4,500 tokens: two pictures
    assert stricter is not None and len(_pictures_of(stricter)) == 2
    assert stricter.content[0]["text"].count("not shown") == 10
    assert _render_pictures(stricter, ctx) is None and _render_pictures(stricter, ctx, emergency=True) is None


def test_the_text_beside_pictures_is_cut_to_the_budget_the_pictures_leave() -> None:
    ctx = context()
    shown = _render_pictures(_with_pictures(log_text(120_000), 1), ctx)
    assert shown is not None and is_compacted(shown) and len(_pictures_of(shown)) == 1
    text = shown.content[0]["text"]
    assert parse(text) is not None and text.endswith("]")
    assert ctx.counter.count_text(text) <= 15_000 - IMAGE_PART_TOKENS
    assert f"[image image/png {byte_size(len(PNG_1X1) + 1)}]" in text  # the tail keeps the line
    assert _render_pictures(shown, ctx) is None
