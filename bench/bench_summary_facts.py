"""Summaries measured on the embedded local model (issue 19): our summary compaction against
LangChain's `SummarizationMiddleware` default prompt, on the same model and conversations.

    python -m bench.bench_summary_facts             # 4 conversations: 2 English, 2 Chinese
    python -m bench.bench_summary_facts --quick     # 2 conversations: 1 English, 1 Chinese
    python -m bench.bench_summary_facts --count 8 --server-sampling

The conversations (`tests/support/summary_facts.py`) plant one fact of each kind our summary
prompt promises to keep (budget, date, count, prohibition, id, name, path) among chit-chat,
before a fact-free tail that compaction keeps. Ours is the guard's `SummaryCompactor` over the
local model's profile budget (summary cap, chunking, the shortening pass when a summary is over
its cap); LangChain's middleware keeps the same tail, so both summarize the same messages. Both
call the same chat model, the one the runtime builds for summaries, on the product's default
local model (`qwen2.5-coder-1.5b`), at the product's summary temperature (greedy,
`CHAT_SHELL_SUMMARY_TEMPERATURE`) unless `--server-sampling` asks for the server's default.

Per conversation and per kind: the share of planted facts present in the summary, whether the
summary is in the conversation's language (its script as `chat_shell.languages` reads it, each
CJK character weighed as a word, planted ids and paths left out), its length against the cap
(the profile's counter), and the time each side took. One summary took 90-380 s on 2 cores
shared with other work (load average 8-12): the default run took 34 minutes (2,061 s),
`--quick` about half of that (5 minutes at load average 2).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

from backend.local_model.catalog import CATALOG, DEFAULT_MODEL
from bench.common import row, verdict
from chat_shell.accounting.budget import budget_for
from chat_shell.accounting.token_counter import TokenCounter
from chat_shell.guard.stages.summary_compaction.settings import CompactionSettings
from tests.support.local_model import serving
from tests.support.summary_facts import (
    KINDS,
    Conversation,
    Summary,
    conversations,
    in_language,
    local_profile,
    summarize_langchain,
    summarize_ours,
    summary_model,
)

SIDES = ("ours", "LangChain")
PRODUCT_TEMPERATURE = CompactionSettings.summary_temperature


def _row(label: str, *cells: object) -> None:
    row(label, *cells, width=40)


async def measure(
    count: int, temperature: float | None, show: bool
) -> dict[str, list[tuple[Conversation, Summary]]]:
    model = CATALOG[DEFAULT_MODEL]
    profile = local_profile(model.profile)
    budget = budget_for(profile)
    counter = TokenCounter.for_profile(profile)
    results: dict[str, list[tuple[Conversation, Summary]]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        async with serving(model, Path(scratch) / "server.log") as server:
            ready = time.perf_counter() - started
            print(f"{model.name} ready in {ready:.0f} s; summary cap {budget.summary_max_tokens} tokens")
            chat = summary_model(server.base_url, profile, budget, temperature=temperature)
            _row("conversation", "side", "facts", "language", "tokens", "seconds", "calls")
            for index, conversation in enumerate(conversations(count)):
                ours = await summarize_ours(chat, profile, conversation)
                theirs = await summarize_langchain(chat, conversation, ours.kept_tail)
                for side, summary in zip(SIDES, (ours, theirs), strict=True):
                    results[side].append((conversation, summary))
                    _row(
                        f"#{index} ({conversation.language}, {ours.kept_tail} messages kept)",
                        side,
                        f"{len(summary.kept(conversation))}/{len(conversation.facts)}",
                        "same" if in_language(summary.text, conversation) else "OTHER",
                        f"{counter.count_text(summary.text)}/{budget.summary_max_tokens}",
                        f"{summary.seconds:.0f}",
                        summary.calls,
                    )
                    if show:
                        print(f"{summary.text}\n", flush=True)
    return results


def _share(pairs: list[tuple[Conversation, Summary]], kind: str | None = None) -> tuple[int, int]:
    facts = [
        (fact, summary)
        for conversation, summary in pairs
        for fact in conversation.facts
        if kind is None or fact.kind == kind
    ]
    return sum(fact.kept_in(summary.text) for fact, summary in facts), len(facts)


def _percent(kept: int, total: int) -> str:
    return f"{kept}/{total} {100 * kept / max(1, total):.0f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 conversations (1 English, 1 Chinese)")
    parser.add_argument("--count", type=int, help="conversations (alternating English, Chinese)")
    parser.add_argument(
        "--server-sampling", action="store_true", help="the server's default sampling, not the product's"
    )
    parser.add_argument("--show", action="store_true", help="print each summary")
    args = parser.parse_args()
    count = args.count or (2 if args.quick else 4)
    print(
        f"summary facts benchmark: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} "
        f"(the machine may be shared); {count} conversations, "
        f"{'server default sampling' if args.server_sampling else f'temperature {PRODUCT_TEMPERATURE:g}'}"
    )
    started = time.perf_counter()
    results = asyncio.run(measure(count, None if args.server_sampling else PRODUCT_TEMPERATURE, args.show))
    elapsed = time.perf_counter() - started
    budget = budget_for(local_profile())
    counter = TokenCounter.for_profile(local_profile())

    print()
    _row("facts kept, by kind", *SIDES)
    for kind in KINDS:
        _row(f"  {kind}", *(_percent(*_share(results[side], kind)) for side in SIDES))
    totals = {side: _share(results[side]) for side in SIDES}
    _row("  all", *(_percent(*totals[side]) for side in SIDES))
    for language in ("en", "zh"):
        _row(
            f"  all, {language} conversations",
            *(_percent(*_share([p for p in results[side] if p[0].language == language])) for side in SIDES),
        )
    _row(
        "summary in the conversation's language",
        *(
            _percent(sum(in_language(s.text, c) for c, s in results[side]), len(results[side]))
            for side in SIDES
        ),
    )
    _row(
        f"summary within the cap ({budget.summary_max_tokens} tokens)",
        *(
            _percent(
                sum(counter.count_text(s.text) <= budget.summary_max_tokens for _, s in results[side]),
                len(results[side]),
            )
            for side in SIDES
        ),
    )
    _row(
        "median tokens",
        *(sorted(counter.count_text(s.text) for _, s in results[side])[count // 2] for side in SIDES),
    )
    _row(
        "seconds per summary (mean)",
        *(f"{sum(s.seconds for _, s in results[side]) / count:.0f}" for side in SIDES),
    )
    print(f"\nwhole run: {elapsed:.0f} s")
    more = totals["ours"][0] > totals["LangChain"][0]
    print(f"ours keeps more planted facts than LangChain's default prompt: {verdict(more)}")
    if not more:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
