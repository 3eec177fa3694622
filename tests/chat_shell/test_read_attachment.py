"""`read_attachment`: token-bounded pages that the guard never has to cut, exact character
offsets, scope and limits, as a plain function and as a LangChain tool."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import ToolException
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode

from backend.settings import Settings
from chat_shell.accounting.budget import budget_for
from chat_shell.accounting.text_counter import TiktokenText, text_counter_for
from chat_shell.agents.builder import AttemptRuntime
from chat_shell.host import TurnServices
from chat_shell.providers.profiles import resolve_profile
from chat_shell.tools.pages import DEFAULT_MAX_CALLS, MESSAGE_OVERHEAD_TOKENS
from chat_shell.tools.read_attachment import ReadAttachmentSession, read_attachment, read_attachment_tool
from chat_shell.tools.registry import TurnFacts, default_tools, tool_error_message
from chat_shell.tools.turn_tools import TurnTools
from tests.support.attachments import AttachmentWorld, attachment_world, count_tokens
from tests.support.files import PNG_1X1, corrupt, docx_bytes, log_bytes
from tests.support.turns import make_request
from tests.support.uploads import upload_ok


@pytest.fixture
async def world(sqlite_url: str, make_settings: Callable[..., Settings]) -> AsyncIterator[AttachmentWorld]:
    async with attachment_world(make_settings(sqlite_url, max_extracted_chars=1_000_000)) as made:
        yield made


def session(world: AttachmentWorld, budget: int = 15_000, max_calls: int = 30) -> ReadAttachmentSession:
    return ReadAttachmentSession(world.conversation_id, world.reader, budget, TiktokenText(), max_calls)


async def page_through(
    state: ReadAttachmentSession, attachment_id: int, limit: int = 0
) -> tuple[str, list[dict[str, object]]]:
    pieces: list[str] = []
    results: list[dict[str, object]] = []
    offset = 0
    while True:
        raw = await read_attachment(state, attachment_id, offset, limit)
        # The whole tool message, envelope included, fits the tool-output budget.
        assert count_tokens(raw) + MESSAGE_OVERHEAD_TOKENS <= state.budget_tokens
        result = json.loads(raw)
        results.append(result)
        assert result["offset"] == offset and result["chars_read"] == len(result["content"])
        pieces.append(result["content"])
        if not result["has_more"]:
            assert result["next_offset"] is None
            break
        assert result["next_offset"] == offset + len(result["content"])
        offset = result["next_offset"]
    return "".join(pieces), results


async def test_pages_through_a_2mb_log_contiguously_within_budget(world: AttachmentWorld) -> None:
    # The extraction limit of this world (1,000,000 chars) truncates the 2 MB log at parse time.
    log = log_bytes()
    ident = await world.attach("server.log", log)
    text, results = await page_through(session(world, max_calls=200), ident)
    assert text == log.decode()[:1_000_000]
    assert len(results) > 10 and all(r["total_chars"] == 1_000_000 for r in results)
    assert all("warning" not in r for r in results[:-1])
    assert "truncated at parse time after 1,000,000 characters" in str(results[-1]["warning"])
    # Pages are full: each holds close to the budget, not a timid fraction of it.
    assert min(count_tokens(json.dumps(r, ensure_ascii=False)) for r in results[:-1]) > 13_000


async def test_escaping_heavy_text_never_overflows_and_never_splits_characters(
    world: AttachmentWorld,
) -> None:
    rng = random.Random(11)
    alphabet = [
        '"',
        "\\",
        "\n",
        "\t",
        "\x01",
        "\x1b",
        "日本",
        "🚀",
        "é",
        "{}",
        " ",
        "a",
        "</s>",
        "<|endoftext|>",
    ]
    text = "".join(rng.choice(alphabet) for _ in range(60_000))
    ident = await world.attach("weird.txt", text.encode())
    source = (await world.reader.read(world.conversation_id, ident, 0, 10**7)).text
    for budget in (15_000, 1_500):
        read, _ = await page_through(session(world, budget=budget, max_calls=10_000), ident)
        assert read == source


async def test_limit_and_offsets(world: AttachmentWorld) -> None:
    text = "".join(f"{i:05d} 🚀 línea\n" for i in range(3_000))
    ident = await world.attach("lines.txt", text.encode())
    state = session(world)
    first = json.loads(await read_attachment(state, ident, 0, 100))
    assert first["content"] == text[:100] and first["next_offset"] == 100 and first["has_more"]
    middle = json.loads(await read_attachment(state, ident, 12_345, 50))
    assert middle["content"] == text[12_345:12_395]
    end = json.loads(await read_attachment(state, ident, len(text), 0))
    assert end["content"] == "" and end["has_more"] is False and "warning" not in end


async def test_clear_errors(world: AttachmentWorld) -> None:
    image = await world.attach("photo.png", PNG_1X1)
    broken = await world.attach("broken.docx", corrupt(docx_bytes(["x"] * 300)))
    small = await world.attach("small.txt", b"abc\n")
    other = (await world.client.post("/api/conversations", json={"title": "other"})).json()["id"]
    elsewhere = int((await upload_ok(world.client, "e.txt", b"e\n", conversation_id=other))["id"])
    state = session(world)
    cases = [
        (987_654, 0, "attachment 987654 is not available in this conversation"),
        (elsewhere, 0, f"attachment {elsewhere} is not available in this conversation"),
        (image, 0, f"attachment {image} (photo.png) is an image: there is no text to read"),
        (broken, 0, "has no readable text: text extraction failed: the DOCX could not be read"),
        (small, 5, "offset 5 is past the end of attachment"),
    ]
    for attachment_id, offset, message in cases:
        with pytest.raises(ToolException, match=message.replace("(", r"\(").replace(")", r"\)")):
            await read_attachment(state, attachment_id, offset)


async def test_per_turn_call_limit(world: AttachmentWorld) -> None:
    ident = await world.attach("a.txt", b"abc\n")
    state = session(world, max_calls=3)
    for _ in range(3):
        await read_attachment(state, ident)
    with pytest.raises(ToolException, match="at most 3 times per turn"):
        await read_attachment(state, ident)


def tool_graph() -> CompiledStateGraph:
    """The tool as the runtime runs it: in a ToolNode, with the attempt's run context."""
    graph = StateGraph(MessagesState, context_schema=AttemptRuntime)
    graph.add_node("tools", ToolNode([read_attachment_tool], handle_tool_errors=tool_error_message))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    return graph.compile()


async def call_tool(graph: CompiledStateGraph, context: AttemptRuntime, **args: object) -> ToolMessage:
    call = AIMessage("", tool_calls=[{"id": "c1", "name": "read_attachment", "args": args}])
    state = await graph.ainvoke({"messages": [call]}, context=context)
    result = state["messages"][-1]
    assert isinstance(result, ToolMessage)
    return result


def turn_context(
    world: AttachmentWorld,
    conversation_id: int | None = None,
    *,
    without_reader: bool = False,
    **profile: Any,
) -> AttemptRuntime:
    """A turn's run context: tools bound to `conversation_id` (default: the world's)."""
    cid = conversation_id or world.conversation_id
    reader = None if without_reader else world.reader
    request = make_request(1, "read it", conversation_id=cid)
    model = replace(resolve_profile("gpt-4o"), **profile)
    turn_tools = TurnTools.for_turn(
        request, budget_for(model), text_counter_for(model), TurnServices(attachments=reader)
    )

    async def hook(state: dict[str, Any]) -> dict[str, Any]:
        return {"llm_input_messages": state["messages"]}

    offered = default_tools().offered(TurnFacts(has_attachments=True))
    return AttemptRuntime(hook=hook, conversation_id=cid, owner_id=1, tools=offered, turn_tools=turn_tools)


async def test_one_tool_serves_every_conversation_through_the_run_context(
    world: AttachmentWorld,
) -> None:
    assert read_attachment_tool.name == "read_attachment"
    schema = read_attachment_tool.tool_call_schema.model_json_schema()
    assert set(schema["properties"]) == {"attachment_id", "offset", "limit"}
    ident = await world.attach("a.txt", "héllo\nwörld\n".encode())
    other = (await world.client.post("/api/conversations", json={"title": "other"})).json()["id"]
    theirs = int((await upload_ok(world.client, "t.txt", b"theirs\n", conversation_id=other))["id"])
    graph = tool_graph()
    mine = turn_context(world)
    assert mine.turn_tools.read_attachment.budget_tokens == 15_000

    ok = await call_tool(graph, mine, attachment_id=ident, offset=6)
    assert ok.status == "success" and json.loads(str(ok.content))["content"] == "wörld\n"
    # The same compiled graph acts for the other conversation when its context says so.
    elsewhere = await call_tool(graph, turn_context(world, other), attachment_id=theirs)
    assert json.loads(str(elsewhere.content))["content"] == "theirs\n"
    refused = await call_tool(graph, mine, attachment_id=theirs)
    assert refused.status == "error"
    assert f"attachment {theirs} is not available in this conversation" in str(refused.content)
    negative = await call_tool(graph, mine, attachment_id=ident, offset=-1)
    assert negative.status == "error"


async def test_the_call_limit_counts_per_turn_and_the_page_budget_follows_the_profile(
    world: AttachmentWorld,
) -> None:
    ident = await world.attach("a.txt", b"abc\n")
    graph = tool_graph()
    context = turn_context(world, tool_output_overrides={"read_attachment": 2_000})
    assert context.turn_tools.read_attachment.budget_tokens == 2_000
    for _ in range(DEFAULT_MAX_CALLS):
        assert (await call_tool(graph, context, attachment_id=ident)).status == "success"
    limited = await call_tool(graph, context, attachment_id=ident)
    assert limited.status == "error" and f"at most {DEFAULT_MAX_CALLS} times per turn" in str(limited.content)
    # The next turn builds its own TurnTools and starts counting again.
    assert (await call_tool(graph, turn_context(world), attachment_id=ident)).status == "success"


async def test_without_a_reader_the_tool_says_attachments_cannot_be_read(world: AttachmentWorld) -> None:
    result = await call_tool(tool_graph(), turn_context(world, without_reader=True), attachment_id=1)
    assert result.status == "error" and "no attachment reader" in str(result.content)
