"""The pure parts of summary compaction: where the view is cut, and how the summarized history
is packed into summarizer chunks (hypothesis over generated message lists)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from chat_shell.accounting.text_counter import TiktokenText
from chat_shell.accounting.token_counter import TokenCounter
from chat_shell.guard.stages.summary_compaction.split import split_view
from chat_shell.guard.stages.summary_compaction.summary_input import chunk_transcript
from tests.conftest import DEEP

EXACT = TokenCounter(TiktokenText())
LABEL = re.compile(r"\n\n\[(?:user|assistant|system|tool result: \w+)\](?: \(continued, part \d+\))?\n")
CALL = re.compile(r"\n\[assistant calls \w+\(\{[^}]*\}\)\]")
EXAMPLES = 300 if DEEP else 50


@st.composite
def histories(draw: st.DrawFn) -> list[BaseMessage]:
    messages: list[BaseMessage] = [SystemMessage("You are helpful.", id="sys")]
    for turn in range(draw(st.integers(1, 8))):
        size = draw(st.sampled_from([3, 40, 400, 3_000]))
        messages.append(HumanMessage(f"<u{turn}> " + "预算 word " * size, id=f"u{turn}"))
        for round_ in range(draw(st.integers(0, 2))):
            calls = [
                {"id": f"c{turn}-{round_}-{n}", "name": "fetch", "args": {"n": n}}
                for n in range(draw(st.integers(1, 2)))
            ]
            messages.append(AIMessage("", tool_calls=calls, id=f"a{turn}-{round_}"))
            for call in calls:
                output = "log line 42 ok\n" * draw(st.sampled_from([2, 200, 2_500]))
                messages.append(
                    ToolMessage(output, tool_call_id=call["id"], name="fetch", id=f"t{call['id']}")
                )
        messages.append(AIMessage(f"<r{turn}> done", id=f"r{turn}"))
    messages.append(HumanMessage("<latest> and now?", id="latest"))
    return messages


@given(messages=histories(), budget=st.integers(0, 12_000))
@settings(max_examples=EXAMPLES, deadline=None)
def test_the_cut_keeps_tool_pairs_whole_and_the_latest_user_message(
    messages: list[BaseMessage], budget: int
) -> None:
    tokens = [EXACT.count_message(m).tokens for m in messages]
    split = split_view(messages, tokens, budget, keep=budget)
    kept = [messages[i] for i in split.kept]
    summarized = [i for part in split.summarized for i in part]
    assert split.system == 1
    assert sorted([*summarized, *split.kept]) == list(range(1, len(messages)))  # each once
    assert summarized == sorted(summarized) and split.kept == sorted(split.kept)
    assert kept[0].id == "latest" or messages[-1] in kept
    assert not isinstance(kept[0], ToolMessage)
    answered = {m.tool_call_id for m in kept if isinstance(m, ToolMessage)}
    for message in kept:
        if isinstance(message, AIMessage):
            assert {call["id"] for call in message.tool_calls} <= answered
    # The tail is within the budget unless the latest user message alone is larger.
    kept_tokens = sum(tokens[i] for i in split.kept)
    assert kept_tokens <= max(budget, tokens[-1])


@given(messages=histories(), budget=st.integers(50, 6_000))
@settings(max_examples=EXAMPLES, deadline=None)
def test_chunks_hold_every_character_in_order_and_fit_their_budget(
    messages: list[BaseMessage], budget: int
) -> None:
    history = messages[1:]
    tokens = [EXACT.count_message(m).tokens for m in history]
    chunks = chunk_transcript(history, tokens, budget)
    transcript = "".join(chunk.text for chunk in chunks)
    calls = CALL.findall(transcript)
    assert len(calls) == sum(len(m.tool_calls) for m in history if isinstance(m, AIMessage))
    assert LABEL.sub("", CALL.sub("", transcript)) == "".join(str(m.content) for m in history)
    for chunk in chunks:
        # Counts are per message (framing included) and cuts proportional: a loose bound.
        assert EXACT.count_text(chunk.text) <= 1.2 * budget + 60
