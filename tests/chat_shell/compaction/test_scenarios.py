"""Summary compaction through the real runtime and the scripted provider: the seeds' scenarios."""

from __future__ import annotations

from typing import Any

from chat_shell.accounting.text_counter import TiktokenText
from chat_shell.contracts import ContextCompactionEvent, TurnCompleted, TurnFailed
from chat_shell.guard.stages.summary_compaction.prompts import SUMMARY_OPENING
from tests.chat_shell.conftest import MakeShell
from tests.conftest import DEEP
from tests.support.conversation import Conversation, chinese_text
from tests.support.scripted_provider import (
    Reply,
    ScriptedProvider,
    count_prompt_tokens,
    http_error,
    summary_input,
    text,
)

CL100K = TiktokenText()
SEED_SETTINGS = {"trigger_tokens": 49_152, "keep_tokens": 24_000, "overhead_tokens": 4_000}


def provider_input(provider: ScriptedProvider, body: dict[str, Any]) -> int:
    """The input tokens the provider reports for `body` (hidden fixed overhead included)."""
    return count_prompt_tokens(body) + provider.hidden_overhead


def compactions(events: list[Any], status: str = "completed") -> list[ContextCompactionEvent]:
    return [
        e
        for e in events
        if isinstance(e, ContextCompactionEvent)
        and e.record.strategy == "summary_compact"
        and e.record.status == status
    ]


async def test_a_long_chinese_conversation_compacts_from_about_twice_keep_to_at_most_keep(
    make_shell: MakeShell, scripted_provider: ScriptedProvider
) -> None:
    scripted_provider.hidden_overhead = 11_000  # the seed's fixed prompt + tool schemas
    shell = make_shell(profile_overrides={"gpt-4o": SEED_SETTINGS}, system_prompt="你是一个细心的购物助手。")
    conversation = Conversation(shell)
    sent_before = 0
    for turn in range(1, 40):
        scripted_provider.script(text(chinese_text(1_200, seed=1_000 + turn)))
        sent_before = len(scripted_provider.requests)
        await conversation.send(chinese_text(1_500, seed=turn))
        if conversation.checkpoint_turn is not None:
            break
    assert conversation.checkpoint_turn is not None, "the conversation never crossed the trigger"
    events = conversation.events[-1]
    assert isinstance(events[-1], TurnCompleted)
    (done,) = compactions(events)
    turn_requests = scripted_provider.requests[sent_before:]
    chat = [body for body in turn_requests if body in scripted_provider.chat_requests]
    assert len(chat) == 1 and len(turn_requests) > 1  # summarizer call(s), then the one model call
    previous_turn = [b for b in scripted_provider.chat_requests if b is not chat[0]][-1]
    before = provider_input(scripted_provider, previous_turn)
    after = provider_input(scripted_provider, chat[0])
    assert before >= 1.8 * SEED_SETTINGS["keep_tokens"], before
    assert after <= SEED_SETTINGS["keep_tokens"], (before, after)
    assert done.record.after_tokens is not None and done.record.after_tokens <= SEED_SETTINGS["keep_tokens"]
    # The model sees: system, the summary (marked only in metadata), the kept tail, the question.
    roles = [m["role"] for m in chat[0]["messages"]]
    assert roles[0] == "system" and chat[0]["messages"][1]["content"].startswith(SUMMARY_OPENING)
    assert chat[0]["messages"][-1]["content"] == conversation.visible[-1][0]
    # The user-visible record holds no summary, and the summarizer's words never streamed.
    assert all(SUMMARY_OPENING not in user + reply for user, reply in conversation.visible)
    assert "Summary of earlier turns" not in "".join(
        e.text
        for e in events
        if e.type == "message.delta"  # type: ignore[union-attr]
    )
    # The checkpoint the turn stored opens with the summary and holds the question it answered.
    chain = conversation.results[-1].messages_chain
    assert chain[0].metadata.summary_compacted and chain[0].metadata.summary_version == 1
    assert any(e.metadata.checkpoint_retained and e.content == conversation.visible[-1][0] for e in chain)
    stored_at_once = [(e.id, e.role, e.content) for e in done.checkpoint_chain or []]
    assert stored_at_once == [(e.id, e.role, e.content) for e in chain[: len(stored_at_once)]]


async def _chinese_turns(
    make_shell: MakeShell, scripted_provider: ScriptedProvider, turns: int
) -> Conversation:
    """A conversation of `turns` long Chinese questions and answers, on the seed's settings."""
    conversation = Conversation(make_shell(profile_overrides={"gpt-4o": SEED_SETTINGS}))
    for turn in range(1, turns + 1):
        scripted_provider.script(text(chinese_text(1_500, seed=turn)))
        await conversation.send(chinese_text(2_000, seed=100 + turn))
    return conversation


async def test_a_first_overflow_forces_one_compaction_and_one_retry_that_succeeds(
    make_shell: MakeShell, scripted_provider: ScriptedProvider
) -> None:
    conversation = await _chinese_turns(make_shell, scripted_provider, 11)
    assert conversation.checkpoint_turn is None  # ~37k local: under the trigger by our estimate
    # The provider adds a large hidden prompt the estimate has not learned yet: it overflows.
    scripted_provider.hidden_overhead = 25_000
    scripted_provider.context_window = 70_000
    sent = len(scripted_provider.requests)
    result = await conversation.send("现在请总结我的要求。")
    chat = [b for b in scripted_provider.requests[sent:] if b in scripted_provider.chat_requests]
    assert len(chat) == 2  # the overflowing call, and one retry after the forced compaction
    events = conversation.events[-1]
    assert isinstance(events[-1], TurnCompleted) and result.termination_reason == "normal_completion"
    (done,) = compactions(events)
    assert done.record.status == "completed"
    assert result.overflow_errors == 1
    assert provider_input(scripted_provider, chat[1]) + 16_384 <= 70_000
    assert conversation.checkpoint_turn == conversation.turns


async def test_an_overflow_after_the_forced_compaction_ends_in_a_clear_refusal_without_a_loop(
    make_shell: MakeShell, scripted_provider: ScriptedProvider
) -> None:
    conversation = await _chinese_turns(make_shell, scripted_provider, 5)
    scripted_provider.context_window = 20_000  # nothing with 16k of output room fits
    sent = len(scripted_provider.requests)
    result = await conversation.send("继续。")
    chat = [b for b in scripted_provider.requests[sent:] if b in scripted_provider.chat_requests]
    assert len(chat) == 2
    terminal = conversation.events[-1][-1]
    assert isinstance(terminal, TurnFailed) and terminal.code == "context_refused"
    assert "no longer fits" in terminal.message and "context window" in terminal.message
    assert result.termination_reason == "context_refused"
    # Shown to the user as the failure's message, never as text of the reply.
    assert terminal.message not in result.value and result.value == terminal.partial


async def test_a_plain_400_or_a_network_error_is_an_error_and_never_compacts(
    make_shell: MakeShell, scripted_provider: ScriptedProvider
) -> None:
    shell = make_shell(profile_overrides={"gpt-4o": SEED_SETTINGS})
    conversation = Conversation(shell)
    scripted_provider.script(http_error(400, message="unsupported parameter: temperature"))
    await conversation.send("hello")
    terminal = conversation.events[-1][-1]
    assert isinstance(terminal, TurnFailed) and terminal.code == "provider_bad_request"
    assert len(scripted_provider.requests) == 1 and not scripted_provider.summary_requests
    assert not compactions(conversation.events[-1], "started")

    unreachable = Conversation(make_shell(base_url="http://127.0.0.1:9/v1"))
    await unreachable.send("hello")
    terminal = unreachable.events[-1][-1]
    assert isinstance(terminal, TurnFailed) and terminal.code == "provider_unavailable"
    assert not compactions(unreachable.events[-1], "started")


FACTS = ("预算 8000 元", "no DSLR cameras", "2026-12-15", "ORD-48213")
SMALL = {
    "trigger_tokens": 6_000,
    "keep_tokens": 3_000,
    "overhead_tokens": 200,
    "summary_max_tokens": 300,
    "trim_tokens_to_summarize": 2_000,
}


def _fact_keeping_summarizer(body: dict[str, Any]) -> Reply:
    """A summarizer that keeps the planted facts it is given, padded far over the cap on the
    first pass (so the shortening pass runs) and compact on the second."""
    source = summary_input(body)
    kept = "; ".join(fact for fact in FACTS if fact in source)
    if "too long" in body["messages"][0]["content"]:
        return text(f"要点：{kept}")
    return text(f"要点：{kept}\n" + chinese_text(1_200, seed=len(source)))


async def test_summary_after_summary_stays_under_its_cap_and_keeps_the_first_turns_facts(
    make_shell: MakeShell, scripted_provider: ScriptedProvider
) -> None:
    shell = make_shell(profile_overrides={"gpt-4o": SMALL})
    conversation = Conversation(shell)
    scripted_provider.summaries.extend([_fact_keeping_summarizer] * 200)
    first = f"我的{FACTS[0]}，不能超。Please remember: {FACTS[1]}. Deadline {FACTS[2]}. Order {FACTS[3]}."
    await conversation.send(first)
    checkpoints = 0
    turn = 1
    while checkpoints < (10 if DEEP else 4):
        turn += 1
        assert turn < 200
        scripted_provider.script(text(chinese_text(400, seed=turn)))
        sent = len(scripted_provider.requests)
        await conversation.send(chinese_text(1_500, seed=500 + turn))
        if conversation.checkpoint_turn != turn:
            continue
        checkpoints += 1
        first_pass = [
            b
            for b in scripted_provider.requests[sent:]
            if b in scripted_provider.summary_requests and "too long" not in b["messages"][0]["content"]
        ]
        assert first_pass
        source = "\n".join(summary_input(b) for b in first_pass)
        assert all(fact in source for fact in FACTS), (checkpoints, source[:500])
        summary = conversation.history[0]
        assert summary.metadata.summary_compacted and isinstance(summary.content, str)
        body = summary.content.removeprefix(SUMMARY_OPENING)
        assert CL100K.count(body) <= SMALL["summary_max_tokens"]
        assert all(fact in body for fact in FACTS)
