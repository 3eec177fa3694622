"""The compaction invariants (issue 6), property-based over generated conversations.

Hypothesis generates conversations with tool loops, Chinese and English text, tool outputs
over their budget and user messages over the whole input budget; each runs turn by turn
through the real runtime against the scripted provider, with a small profile so it compacts
often. Every message carries a unique marker `⟦n⟧` at its start (the part of a tool output the
source stage keeps), so what reaches which request can be traced. 50 examples by default, 300
with CHAT_SHELL_DEEP=1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from langchain_core.tools import tool
from langchain_openai.chat_models.base import _convert_message_to_dict

from chat_shell.accounting.budget import budget_for
from chat_shell.contracts import TextBlock, ToolBlock, TurnFailed
from chat_shell.guard.stages.summary_compaction.prompts import SUMMARY_OPENING
from chat_shell.messages.convert import to_langchain
from chat_shell.runtime import ChatShell
from chat_shell.tools.registry import ToolRegistry
from tests.chat_shell.conftest import MakeShell
from tests.conftest import DEEP
from tests.support.conversation import Conversation, chinese_text
from tests.support.scripted_provider import (
    Reply,
    ScriptedProvider,
    ScriptedToolCall,
    content_text,
    count_prompt_tokens,
    is_summary_request,
    text,
)
from tests.support.texts import SMALL_PROFILE

PROFILE = {**SMALL_PROFILE, "tool_output_tokens": 1_000}
MARKER = re.compile(r"⟦(\d+)⟧")
EN_WORDS = [
    "budget",
    "camera",
    "order",
    "delivery",
    "invoice",
    "report",
    "schedule",
    "deadline",
    "lens",
    "warehouse",
]
SYSTEM_PROMPT = "You are a careful assistant."
# Tool outputs of the example being run, by key (the tool reads them).
OUTPUTS: dict[str, str] = {}


@tool
async def fetch(key: str) -> str:
    """Fetch the stored document `key`."""
    return OUTPUTS[key]


def body_text(language: str, tokens: int, seed: int) -> str:
    if language == "zh":
        return chinese_text(tokens, seed)
    words = [EN_WORDS[(seed + i * 7) % len(EN_WORDS)] for i in range(tokens)]
    return " ".join(words)


# -------------------------------------------------------------------------------- generation

languages = st.sampled_from(["en", "zh"])
tool_sizes = st.one_of(st.integers(5, 300), st.integers(1_500, 5_000))


@st.composite
def turn_plans(draw: st.DrawFn) -> dict[str, Any]:
    size = draw(st.one_of(st.integers(5, 200), st.integers(200, 1_200)))
    if draw(st.integers(0, 19)) == 19:
        size = 16_500  # over the whole input budget: refused, never sent, still stored
    rounds = draw(st.lists(st.lists(st.tuples(languages, tool_sizes), min_size=1, max_size=2), max_size=2))
    return {"language": draw(languages), "size": size, "rounds": rounds, "reply": draw(st.integers(5, 150))}


conversations = st.lists(turn_plans(), min_size=2, max_size=7)


# -------------------------------------------------------------------------------- running


@dataclass
class Turn:
    user: str
    refused: bool
    # Markers entering the conversation before each chat request of the turn, in order.
    entering: list[set[int]] = field(default_factory=list)
    reply: str = ""
    outputs: list[str] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Run:
    conversation: Conversation
    turns: list[Turn]
    requests: list[dict[str, Any]]


async def run(
    shell: ChatShell, provider: ScriptedProvider, plans: list[dict[str, Any]], *, ahead: bool = False
) -> Run:
    provider.reset()
    OUTPUTS.clear()
    conversation = Conversation(shell, ahead=ahead)
    counter = iter(range(1, 1_000_000))
    turns: list[Turn] = []
    pending_reply: set[int] = set()
    for number, plan in enumerate(plans, start=1):
        user = f"⟦{next(counter)}⟧ " + body_text(plan["language"], plan["size"], number)
        turn = Turn(user=user, refused=plan["size"] > 16_000)
        turn.entering.append({*pending_reply, *_markers(user)})
        scripted: list[Reply] = []
        for index, calls in enumerate(plan["rounds"]):
            tool_calls = []
            entering: set[int] = set()
            for call_number, (language, size) in enumerate(calls):
                key = f"t{number}-{index}-{call_number}"
                marker = next(counter)
                OUTPUTS[key] = f"⟦{marker}⟧ " + body_text(language, size, marker)
                turn.outputs.append(OUTPUTS[key])
                entering.add(marker)
                tool_calls.append(ScriptedToolCall(name="fetch", args={"key": key}))
            scripted.append(Reply(tool_calls=tool_calls))
            turn.entering.append(entering)
        marker = next(counter)
        turn.reply = f"⟦{marker}⟧ " + body_text("en", plan["reply"], marker)
        scripted.append(text(turn.reply))
        if not turn.refused:
            provider.script(*scripted)
        sent = len(provider.requests)
        await conversation.send(user)
        provider.replies.clear()
        turn.requests = provider.requests[sent:]
        pending_reply = {marker} if not turn.refused else set()
        turns.append(turn)
    return Run(conversation, turns, list(provider.requests))


def _markers(text: str) -> list[int]:
    return [int(n) for n in MARKER.findall(text)]


def _text(message: dict[str, Any]) -> str:
    return content_text(message)


def _request_markers(body: dict[str, Any]) -> set[int]:
    return {n for message in body["messages"] for n in _markers(_text(message))}


# -------------------------------------------------------------------------------- invariants


def check_visible_history(result: Run) -> None:
    """1. The user-visible record is exactly what was sent and shown; no summary in it."""
    conversation = result.conversation
    assert [user for user, _ in conversation.visible] == [turn.user for turn in result.turns]
    for turn, turn_result in zip(result.turns, conversation.results, strict=True):
        blocks = turn_result.blocks
        assert all(SUMMARY_OPENING not in getattr(b, "text", "") for b in blocks)
        if turn.refused:
            assert turn_result.termination_reason == "context_refused"
            continue
        assert [b.output for b in blocks if isinstance(b, ToolBlock)] == turn.outputs
        assert [b.text for b in blocks if isinstance(b, TextBlock)] == [turn.reply]
        assert turn_result.value == turn.reply


def check_tool_pairs(requests: list[dict[str, Any]]) -> None:
    """2. No request splits a tool call from its results or starts with an orphan result."""
    for body in requests:
        open_calls: set[str] = set()
        for message in body["messages"]:
            if message["role"] == "tool":
                assert message["tool_call_id"] in open_calls, body["messages"]
                open_calls.discard(message["tool_call_id"])
                continue
            assert not open_calls, "a tool call without its result"
            open_calls = {call["id"] for call in message.get("tool_calls") or []}
        assert not open_calls


def check_within_budget(result: Run, available: int) -> None:
    """3. Every request fits the available input, or the turn was refused and sent nothing."""
    for turn, events in zip(result.turns, result.conversation.events, strict=True):
        chat = [b for b in turn.requests if not is_summary_request(b)]
        if turn.refused:
            terminal = events[-1]
            assert isinstance(terminal, TurnFailed) and terminal.code == "context_refused"
            assert "too long" in terminal.message and not chat
            continue
        for body in turn.requests:
            assert count_prompt_tokens(body) <= available, count_prompt_tokens(body)


def check_latest_user_message(result: Run) -> None:
    """4. The turn's user message reaches every model call of the turn whole, last among the
    user messages, and no summary request of the turn folds it in."""
    for turn in result.turns:
        marker = _markers(turn.user)[0]
        for body in turn.requests:
            if is_summary_request(body):
                assert marker not in _request_markers(body)
                continue
            users = [
                m
                for m in body["messages"]
                if m["role"] == "user" and not _text(m).startswith(SUMMARY_OPENING)
            ]
            assert users and _text(users[-1]) == turn.user


def check_every_chunk_summarized(result: Run) -> None:
    """5. A message that leaves the model's view was in a summary request first, in order
    (a compaction ahead of time sends its summary requests after the turn it follows)."""
    previous: set[int] = set()
    # Markers summarized since the last chat request; `compaction`: those of one compaction,
    # in the order its summary requests were sent.
    summarized: set[int] = set()
    compaction: list[int] = []
    for turn in result.turns:
        chat_index = 0
        for body in turn.requests:
            if is_summary_request(body):
                markers = [n for m in body["messages"] for n in _markers(_text(m))]
                summarized.update(markers)
                compaction.extend(markers)
                continue
            view = previous | turn.entering[chat_index]
            shown = _request_markers(body)
            missing = view - shown
            assert missing <= summarized, (missing, sorted(summarized))
            assert compaction == sorted(compaction)
            previous, summarized, compaction = shown, set(), []
            chat_index += 1
        # Summary requests after the turn's last chat request are a compaction ahead of time:
        # in order by themselves (a later turn's compaction may summarize again what its
        # checkpoint kept, such as the shortened previous user message).
        assert compaction == sorted(compaction)
        compaction = []
        if not turn.refused and chat_index:
            previous = previous | {_markers(turn.reply)[0]}
        elif turn.refused:
            previous = previous | set(_markers(turn.user))


def check_requests_rebuild_from_the_checkpoint(result: Run) -> None:
    """6. Turn N's first request = system + checkpoint of K + chains of K+1..N-1 + the new
    input, as the provider received it (the history the helper resolves like the backend, from
    the chains as stored: a checkpoint made ahead of time is stored on the turn it follows)."""
    conversation = result.conversation
    history: list[Any] = []
    for index, turn in enumerate(result.turns):
        first = next((b for b in turn.requests if not is_summary_request(b)), None)
        if first is not None and not is_summary_request(turn.requests[0]):
            expected = [{"role": "system", "content": SYSTEM_PROMPT}]
            expected += [_convert_message_to_dict(to_langchain(entry)) for entry in history]
            expected.append({"role": "user", "content": turn.user})
            assert first["messages"] == expected
        chain = conversation.stored[index]
        summaries = [i for i, entry in enumerate(chain) if entry.metadata.summary_compacted]
        if summaries:
            history = chain[summaries[-1] :]
        else:
            history = [*history, conversation.user_entry(index + 1, turn.user), *chain]


_PROPERTY = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)


@given(plans=conversations)
@settings(_PROPERTY, max_examples=300 if DEEP else 25)
async def test_compaction_invariants_hold_on_generated_conversations(
    make_shell: MakeShell, scripted_provider: ScriptedProvider, plans: list[dict[str, Any]]
) -> None:
    await _check_invariants(make_shell, scripted_provider, plans, ahead=False)


@pytest.mark.timeout(900)
@given(plans=conversations)
@settings(_PROPERTY, max_examples=300 if DEEP else 12)
async def test_compaction_invariants_hold_with_compaction_ahead_of_time(
    make_shell: MakeShell, scripted_provider: ScriptedProvider, plans: list[dict[str, Any]]
) -> None:
    """The same invariants with a compaction ahead of time after each turn, as the backend
    schedules it."""
    await _check_invariants(make_shell, scripted_provider, plans, ahead=True)


async def _check_invariants(
    make_shell: MakeShell, scripted_provider: ScriptedProvider, plans: list[dict[str, Any]], *, ahead: bool
) -> None:
    shell = make_shell(
        tools=ToolRegistry([fetch]), profile_overrides={"gpt-4o": PROFILE}, system_prompt=SYSTEM_PROMPT
    )
    result = await run(shell, scripted_provider, plans, ahead=ahead)
    available = budget_for(shell.profile()).available_input
    checkpoints = sum(
        any(e.metadata.summary_compacted for e in r.messages_chain) for r in result.conversation.results
    )
    event(f"turns that compacted: {min(checkpoints, 3)}{'+' if checkpoints >= 3 else ''}")
    event(f"refused turns: {sum(t.refused for t in result.turns) > 0}")
    made_ahead = sum(
        o is not None and o.checkpoint_chain is not None for o in result.conversation.ahead_outcomes
    )
    event(f"ahead: {ahead}, checkpoints made ahead: {min(made_ahead, 2)}{'+' if made_ahead >= 2 else ''}")
    check_visible_history(result)
    check_tool_pairs(result.requests)
    check_within_budget(result, available)
    check_latest_user_message(result)
    check_every_chunk_summarized(result)
    check_requests_rebuild_from_the_checkpoint(result)
