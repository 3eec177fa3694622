"""Message shapes: chain conversion, tool-pair repair, chain serialization and validation."""

from __future__ import annotations

import base64
import json

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from chat_shell.agents.serializer import ChainValidationError, serialize_chain, validate_chain
from chat_shell.agents.turn_context import TurnContext
from chat_shell.contracts import MAX_MODEL_IMAGE_BYTES, ChainMessage, ToolCall
from chat_shell.messages.convert import initial_messages, to_chain, to_langchain, tool_output_text
from chat_shell.messages.markers import is_summary, markers, with_markers
from chat_shell.messages.tool_images import image_url_part, tool_result_content
from chat_shell.messages.tool_pairs import sanitize_tool_pairs
from chat_shell.sizes import byte_size
from tests.support.files import PNG_1X1
from tests.support.history import ai, call, summary, tool
from tests.support.turns import make_request


def _call(call_id: str, name: str = "generate_report") -> dict[str, object]:
    return {"id": call_id, "name": name, "args": {"rows": 1}, "type": "tool_call"}


def test_chain_round_trip_keeps_markers_and_tool_calls() -> None:
    chain = [
        summary("budget 4000 EUR"),
        ai("", call("c1", "t", x=1)),
        tool("c1", "[compact]", compacted=True),
    ]
    messages = [to_langchain(entry) for entry in chain]
    assert is_summary(messages[0])
    assert messages[1].tool_calls[0]["args"] == {"x": 1}  # type: ignore[attr-defined]
    assert markers(messages[2]).compacted
    assert [to_chain(m) for m in messages] == chain


IMAGE_TYPES = "PNG, JPEG, GIF or WebP"


def test_multimodal_tool_output_is_json_with_media_replaced() -> None:
    content = [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "text", "text": "chart attached"},
    ]
    rendered = tool_output_text(content)
    assert json.loads(rendered) == [
        {"type": "text", "text": f"[image image/png 3 B: not shown, its data is not a {IMAGE_TYPES} image]"},
        {"type": "text", "text": "chart attached"},
    ]
    assert "base64" not in rendered and "{'type'" not in rendered


def test_a_tool_result_with_pictures_is_its_text_with_a_placeholder_line_for_each() -> None:
    picture = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    assert tool_output_text([{"type": "text", "text": "chart attached"}, picture]) == (
        "chart attached\n[image image/png 3 B]"
    )
    described = [{"type": "text", "text": "chart attached\n[image image/png 3 B]"}, picture]
    assert tool_output_text(described) == "chart attached\n[image image/png 3 B]"


def test_initial_messages_order_and_stable_user_id() -> None:
    history = [ChainMessage(role="assistant", content="earlier answer", id="a0")]
    messages = initial_messages(make_request(3, "now", history=history), history, "be brief")
    assert [type(m) for m in messages] == [SystemMessage, AIMessage, HumanMessage]
    # The id later histories give the same message (backend `resolve_history`), so counts carry over.
    assert messages[-1].id == "u1-5" and messages[-1].content == "now"
    assert markers(messages[-1]).source_message_id == 5
    again = initial_messages(make_request(3, "now", history=history), history, "be brief")
    assert [m.id for m in again] == [m.id for m in messages]


def test_turn_context_assigns_missing_ids_and_tells_new_messages() -> None:
    turn, messages = TurnContext.start(7, [HumanMessage("a"), HumanMessage("b", id="u2")])
    assert all(m.id for m in messages)
    assert turn.original_input_ids == {messages[0].id, "u2"}
    produced = AIMessage("reply", id="r1")
    # Compaction may drop and reorder input messages; new ones are still recognized by id.
    assert turn.produced([produced, messages[1]]) == [produced]


def test_sanitize_drops_orphans_and_unanswered_calls() -> None:
    messages = [
        HumanMessage("q", id="h"),
        ToolMessage("orphan", tool_call_id="nobody", id="t0"),
        AIMessage("", id="a1", tool_calls=[_call("c1"), _call("c2")]),
        ToolMessage("r1", tool_call_id="c1", id="t1"),
        AIMessage("I will look", id="a2", tool_calls=[_call("c3")]),
        AIMessage("", id="a3", tool_calls=[_call("c4")]),
    ]
    result = sanitize_tool_pairs(messages)
    assert [m.id for m in result] == ["h", "a1", "t1", "a2"]
    assert [c["id"] for c in result[1].tool_calls] == ["c1"]  # type: ignore[attr-defined]
    assert result[3].tool_calls == [] and result[3].content == "I will look"  # type: ignore[attr-defined]
    # The input is untouched.
    assert len(messages[2].tool_calls) == 2  # type: ignore[attr-defined]


def test_sanitize_requires_results_right_after_their_call() -> None:
    messages = [
        AIMessage("", id="a1", tool_calls=[_call("c1")]),
        HumanMessage("interrupting", id="h"),
        ToolMessage("late", tool_call_id="c1", id="t1"),
    ]
    assert [m.id for m in sanitize_tool_pairs(messages)] == ["h"]


def test_sanitize_drops_unparsable_calls() -> None:
    bad = AIMessage(
        "text",
        id="a1",
        invalid_tool_calls=[
            {"id": "x", "name": "t", "args": "{oops", "error": None, "type": "invalid_tool_call"}
        ],
    )
    [clean] = sanitize_tool_pairs([bad])
    assert clean.invalid_tool_calls == [] and clean.content == "text"  # type: ignore[attr-defined]


def test_serializer_keeps_only_marked_user_and_system_messages() -> None:
    retained = with_markers(HumanMessage("kept question", id="r"), checkpoint_retained=True)
    messages = [
        SystemMessage("system prompt", id="s"),
        HumanMessage("plain user text", id="u"),
        retained,
        AIMessage("answer", id="a"),
    ]
    chain = serialize_chain(messages)
    assert [(e.role, e.id) for e in chain] == [("user", "r"), ("assistant", "a")]
    assert chain[0].metadata.checkpoint_retained


@pytest.mark.parametrize(
    "chain",
    [
        [ChainMessage(role="tool", content="x", tool_call_id="c1")],
        [
            ChainMessage(role="assistant", tool_calls=[ToolCall(id="c1", name="t")]),
            ChainMessage(role="assistant", content="next"),
        ],
        [ChainMessage(role="assistant", tool_calls=[ToolCall(id="c1", name="t")])],
    ],
    ids=["orphan-result", "unanswered-then-more", "unanswered-at-end"],
)
def test_validation_fails_fast_on_broken_pairs(chain: list[ChainMessage]) -> None:
    with pytest.raises(ChainValidationError):
        validate_chain(chain)


def test_validation_accepts_parallel_calls() -> None:
    validate_chain(
        [
            ChainMessage(
                role="assistant", tool_calls=[ToolCall(id="c1", name="t"), ToolCall(id="c2", name="t")]
            ),
            ChainMessage(role="tool", content="1", tool_call_id="c2"),
            ChainMessage(role="tool", content="2", tool_call_id="c1"),
            ChainMessage(role="assistant", content="done"),
        ]
    )


def test_each_media_part_of_a_tool_result_becomes_a_placeholder_line_and_only_good_images_stay() -> None:
    png = base64.b64encode(PNG_1X1).decode()
    too_big = base64.b64encode(PNG_1X1 + bytes(MAX_MODEL_IMAGE_BYTES)).decode()
    content = tool_result_content(
        [
            {"type": "text", "text": "results"},
            {"type": "image", "base64": png, "mime_type": "image/png"},
            {"type": "image", "base64": png, "mime_type": "image/jpeg"},  # the bytes say PNG
            {"type": "image", "base64": "%%%", "mime_type": "image/png"},
            {"type": "image", "base64": png, "mime_type": "text/plain"},
            {"type": "image", "base64": png, "mime_type": "image/bmp"},
            {"type": "image", "base64": base64.b64encode(b"plain text").decode(), "mime_type": "image/gif"},
            {"type": "image", "base64": too_big, "mime_type": "image/png"},
            {"type": "image", "url": "https://example.test/a.png", "mime_type": "image/png"},
            {
                "type": "file",
                "base64": base64.b64encode(b"%PDF-1.7").decode(),
                "mime_type": "application/pdf",
            },
            {"type": "file", "url": "https://example.test/r.pdf", "mime_type": "application/pdf"},
        ]
    )
    assert isinstance(content, list)
    first, *pictures = content
    size = byte_size(len(PNG_1X1))
    assert first["text"].splitlines() == [
        "results",
        f"[image image/png {size}]",
        f"[image image/png {size}]",
        "[image image/png: not shown, its data is not valid base64]",
        "[image text/plain: not shown, its type is not an image type]",
        f"[image image/bmp {size}: not shown, models are shown PNG, JPEG, GIF or WebP images only]",
        "[image image/gif 10 B: not shown, its data is not a PNG, JPEG, GIF or WebP image]",
        f"[image image/png {byte_size(len(PNG_1X1) + MAX_MODEL_IMAGE_BYTES)}: not shown, larger than the "
        "5.0 MB models are shown]",
        "[image image/png https://example.test/a.png: not shown, the tool sent only its address]",
        "[file application/pdf 8 B: not shown, only images are shown to models]",
        "[file application/pdf https://example.test/r.pdf: not shown, only images are shown to models]",
    ]
    assert pictures == [image_url_part("image/png", png)] * 2
    assert tool_output_text(content) == first["text"]
    # Text alone stays one text; anything that is neither text nor media is left as it is.
    assert tool_result_content([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]) == "a\nb"
    assert tool_result_content([{"type": "json", "value": 1}]) is None
