"""Compaction ahead of time through the real runtime (issue 20): between turns, the same
compactor makes the checkpoint the next turn starts from, so that turn calls no summarizer."""

from __future__ import annotations

from chat_shell.accounting.budget import budget_for
from chat_shell.contracts import AheadRequest, ContextCompactionEvent
from chat_shell.guard.stages.summary_compaction.prompts import SUMMARY_OPENING
from tests.chat_shell.conftest import MakeShell
from tests.support.conversation import Conversation
from tests.support.scripted_provider import ScriptedProvider, http_error, is_summary_request, text
from tests.support.texts import SMALL_PROFILE, WORDS


async def _until_ahead(conversation: Conversation, provider: ScriptedProvider) -> ContextCompactionEvent:
    for turn in range(1, 20):
        provider.script(text(f"Reply {turn}: noted, order ORD-{48_000 + turn}."))
        await conversation.send(f"Turn {turn}: " + WORDS * 40)
        outcome = conversation.ahead_outcomes[-1]
        if outcome is not None:
            return outcome
    raise AssertionError("the conversation never crossed the pre-trigger")


async def test_a_conversation_over_the_pre_trigger_gets_its_checkpoint_before_the_next_send(
    make_shell: MakeShell, scripted_provider: ScriptedProvider
) -> None:
    shell = make_shell(profile_overrides={"gpt-4o": SMALL_PROFILE}, system_prompt="Be brief.")
    budget = budget_for(shell.profile())
    assert budget.ahead_trigger == int(0.7 * budget.trigger)
    conversation = Conversation(shell, ahead=True)
    outcome = await _until_ahead(conversation, scripted_provider)
    turn = conversation.turns
    # Made before the trigger was reached: no turn compacted inline.
    assert not [r for r in conversation.results if r.context_compactions]
    record = outcome.record
    assert (record.strategy, record.status, record.checkpoint_message_id) == (
        "summary_ahead",
        "completed",
        turn * 2,
    )
    assert record.after_tokens is not None and record.after_tokens <= budget.keep
    chain = outcome.checkpoint_chain
    assert chain is not None and chain[0].metadata.summary_compacted
    # The finished turn's own reply stays as it is (its id, no retained marker); the rest is cloned.
    own = conversation.results[-1].messages_chain
    assert chain[-len(own) :] == own
    assert all(entry.metadata.checkpoint_retained for entry in chain[1 : -len(own)])
    assert chain[-len(own) - 1].content == f"Turn {turn}: " + WORDS * 40  # the latest user message, whole
    # The next turn starts from that checkpoint and calls no summarizer.
    summaries = len(scripted_provider.summary_requests)
    conversation.ahead = False
    scripted_provider.script(text("Done."))
    result = await conversation.send("And now?")
    assert len(scripted_provider.summary_requests) == summaries
    assert not result.context_compactions
    sent = scripted_provider.chat_requests[-1]["messages"]
    assert sent[0]["content"] == "Be brief." and sent[1]["content"].startswith(SUMMARY_OPENING)
    assert sent[-1]["content"] == "And now?"


async def test_below_the_pre_trigger_nothing_is_summarized(
    make_shell: MakeShell, scripted_provider: ScriptedProvider
) -> None:
    shell = make_shell(profile_overrides={"gpt-4o": SMALL_PROFILE})
    conversation = Conversation(shell, ahead=True)
    scripted_provider.script(text("Hi."))
    await conversation.send("Hello there.")
    assert conversation.ahead_outcomes == [None]
    assert not [b for b in scripted_provider.requests if is_summary_request(b)]


async def test_a_failed_summary_ahead_is_a_fallback_and_stores_nothing(
    make_shell: MakeShell, scripted_provider: ScriptedProvider
) -> None:
    shell = make_shell(profile_overrides={"gpt-4o": SMALL_PROFILE})
    conversation = Conversation(shell)
    for turn in range(1, 8):
        scripted_provider.script(text("Noted."))
        await conversation.send(f"Turn {turn}: " + WORDS * 40)
    assert not [r for r in conversation.results if r.context_compactions]
    scripted_provider.summaries.append(http_error(500))
    own = conversation.results[-1].messages_chain
    outcome = await shell.compact_ahead(
        AheadRequest(
            conversation_id=1,
            owner_id=1,
            turn_id=7,
            assistant_message_id=14,
            history=conversation.history,
            own_ids=[entry.id for entry in own if entry.id],
        ),
        lambda _: None,
    )
    assert outcome is not None and outcome.checkpoint_chain is None
    assert (outcome.record.strategy, outcome.record.status) == ("summary_ahead", "fallback")
    assert outcome.record.failure_reason and outcome.record.failure_reason.startswith("summarizer_")
