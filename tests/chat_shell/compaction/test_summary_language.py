"""A summary is written in the conversation's language (issue 35): the language is stated last,
in that language, and a summary that comes back in another one is rewritten once."""

from __future__ import annotations

from langchain_core.messages import BaseMessage

from chat_shell.accounting.budget import budget_for
from chat_shell.accounting.token_counter import TokenCounter
from chat_shell.guard.stages.summary_compaction.compactor import SummaryCompactor
from chat_shell.guard.stages.summary_compaction.prompts import LANGUAGE_REQUIREMENTS
from chat_shell.guard.stages.summary_compaction.summary_input import message_text
from tests.support.summary_facts import conversation, local_profile, request_at_trigger

ENGLISH = "Budget: 2750 yuan. Date: 2026-01-24. 53 people. No sesame."
CHINESE = "预算：2750元。日期：2026-01-24。53人。不能有芝麻。"


class Summarizer:
    """The model boundary: answers each summarizer call from a script, recording the prompts."""

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.prompts: list[list[BaseMessage]] = []

    async def __call__(self, messages: list[BaseMessage]) -> str:
        self.prompts.append(messages)
        return self.replies.pop(0)


async def _summary(index: int, summarizer: Summarizer) -> str:
    profile = local_profile()
    budget, counter = budget_for(profile), TokenCounter.for_profile(profile)
    messages = conversation(index).messages
    tokens = [counter.count_message(m).tokens for m in messages]
    outcome = await SummaryCompactor(summarizer, conversation_id=1)(
        request_at_trigger(messages, tokens, counter, budget, lambda _: None)
    )
    assert outcome.record.summary_text is not None, outcome.record
    return outcome.record.summary_text


async def test_a_chinese_conversation_is_told_last_and_in_chinese_to_be_summarized_in_chinese() -> None:
    summarizer = Summarizer(CHINESE)
    assert await _summary(1, summarizer) == CHINESE
    (prompt,) = summarizer.prompts
    assert message_text(prompt[-1]).endswith(LANGUAGE_REQUIREMENTS["zh"])


async def test_a_summary_of_a_chinese_conversation_written_in_english_is_rewritten_in_chinese() -> None:
    summarizer = Summarizer(ENGLISH, CHINESE)
    assert await _summary(1, summarizer) == CHINESE
    rewrite = summarizer.prompts[1]
    assert ENGLISH in message_text(rewrite[-1]) and "中文" in message_text(rewrite[0])


async def test_an_english_conversation_gets_no_cjk_requirement_and_no_rewrite() -> None:
    summarizer = Summarizer(ENGLISH)
    assert await _summary(0, summarizer) == ENGLISH
    (prompt,) = summarizer.prompts
    assert message_text(prompt[-1]).endswith("</transcript>")
