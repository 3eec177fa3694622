"""Summary compaction on the real local model keeps the facts its prompt promises to keep (issue
19, 35): a small sample of `bench.bench_summary_facts` (a Chinese conversation; deep mode adds an English one;
the benchmark adds more and LangChain's default prompt), with the product's default local model and
the guard's own summary stage, greedy so the run repeats."""

from __future__ import annotations

from pathlib import Path

import pytest

from chat_shell.accounting.budget import budget_for
from chat_shell.accounting.token_counter import TokenCounter
from tests.support.local_model import require_local_model, serving
from tests.support.summary_facts import (
    conversation,
    local_profile,
    off_language_lines,
    summarize_ours,
    summary_model,
)

pytestmark = pytest.mark.local_model

# Of the 7 planted facts (budget, date, count, prohibition, id, name, path). Measured greedy on
# the English conversation: our prompt keeps 7; the same prompt with its list of what to keep replaced
# by "Summarize the conversation." keeps 3 (budget, count, prohibition); LangChain's default
# prompt keeps none; our prompt before it asked for values copied exactly and a key values
# section kept 4. On the Chinese one ours keeps 7, in Chinese; without the language requirement
# after the transcript it was written in English.
MIN_FACTS_KEPT = 5


@pytest.mark.timeout(600)
# The default suite runs the Chinese one (facts and language); deep mode adds the English one.
@pytest.mark.parametrize(
    "index", [pytest.param(0, id="english", marks=pytest.mark.deep), pytest.param(1, id="chinese")]
)
async def test_the_summary_keeps_the_planted_facts_in_the_conversations_language_within_the_cap(
    tmp_path: Path, index: int
) -> None:
    model = require_local_model("qwen2.5-coder-1.5b")
    profile = local_profile(model.profile)
    budget = budget_for(profile)
    planted = conversation(index)
    async with serving(model, tmp_path / "server.log") as server:
        chat = summary_model(server.base_url, profile, budget)
        summary = await summarize_ours(chat, profile, planted)
    kept = {fact.kind for fact in summary.kept(planted)}
    assert len(kept) >= MIN_FACTS_KEPT, (sorted(kept), summary.text)
    assert off_language_lines(summary.text, planted) == [], summary.text
    assert TokenCounter.for_profile(profile).count_text(summary.text) <= budget.summary_max_tokens
