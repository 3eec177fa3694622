"""Summary compaction (issue 6) against LangChain's `SummarizationMiddleware`, on the shared workloads.

    python -m bench.bench_compaction            # W200, W2000, W20000 (W20000 is generated once, ~25 s)
    python -m bench.bench_compaction --quick    # W200, W2000
    python -m bench.bench_compaction W20000     # one workload

Both sides use trigger 49,152 and keep 24,000 tokens and an instant summarizer (a chat model
that answers at once), so only CPU work is timed, in one process on the same messages:

- LangChain: `SummarizationMiddleware(trigger=("tokens", 49152), keep=("tokens", 24000))`
  `.before_model` on the whole history (its approximate counter, binary-searched cut, 4,000-token
  trim of what it summarizes, prompt formatting, summary call, state rewrite);
- ours, warm: the whole compaction path with every message's count already cached, as in a live
  session where each message was counted once on arrival: the decision (estimate over the
  cached counts), the split (binary search over cumulative counts, safe boundary), the chunk
  assembly of the entire history to summarize (in order, nothing dropped), the summarizer calls,
  and the checkpoint (summary message, retained tail clones, the checkpoint chain event);
- ours, cold: the same on a history never counted before: one tiktoken pass, then the above.

Recall: the share of the workload's 8 planted needles that reach a summarizer request, on a
single compaction and over a live replay that feeds the conversation one message at a time
with the hook (our guard, or LangChain's `before_model`) before every model call. The replay's
summarizer is extractive (it keeps the needles it is shown), so the replay also reports how
many needles are still in the model's input at the end.
Size: the model input after our compaction in exact cl100k tokens, fixed overhead included.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

import langchain
from langchain.agents.middleware.summarization import SummarizationMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, RemoveMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from pydantic import Field

from bench.common import verdict
from bench.workloads import load, workload_module
from chat_shell.accounting.budget import Budget, budget_for
from chat_shell.accounting.text_counter import TiktokenText
from chat_shell.accounting.token_counter import TokenCounter
from chat_shell.contracts import TurnEvent
from chat_shell.guard.context_guard import UnifiedContextGuard
from chat_shell.guard.stages.summary_compaction.compactor import SummaryCompactor
from chat_shell.providers.profiles import resolve_profile
from tests.support.summary_facts import request_at_trigger

TRIGGER, KEEP = 49_152, 24_000
PROFILE = resolve_profile(
    "gpt-4o",
    overrides={"*": {"trigger_tokens": TRIGGER, "keep_tokens": KEEP, "overhead_tokens": 4_000}},
)
# (timed repeats of each side) per workload; the replay runs on the small workloads only.
REPEATS = {"W200": 15, "W2000": 15, "W20000": 5}
REPLAY = ("W200", "W2000")


class InstantSummarizer:
    """Our summarizer seam: answers at once; remembers every request's text for the recall."""

    def __init__(self, needles: Sequence[str], *, extractive: bool = False) -> None:
        self.needles = needles
        self.extractive = extractive
        # Request contents, searched for needles after the timed runs (not the seam's work).
        self.requests: list[str | list[Any]] = []
        self.calls = 0

    async def __call__(self, messages: list[BaseMessage]) -> str:
        self.calls += 1
        content = messages[-1].content
        if not self.extractive:
            self.requests.append(content)
            return "Summary of the earlier turns."
        text = _joined(content)
        found = [needle for needle in self.needles if needle in text]
        self.requests.append("; ".join(found))
        return "Summary: " + "; ".join(found)

    @property
    def seen(self) -> set[str]:
        texts = [_joined(content) for content in self.requests]
        return {needle for needle in self.needles if any(needle in text for text in texts)}


def _joined(content: str | list[Any]) -> str:
    if isinstance(content, str):
        return content
    return "".join(part["text"] if isinstance(part, dict) else str(part) for part in content)


class InstantModel(BaseChatModel):
    """LangChain's summarizer seam: a chat model that answers at once and records its input."""

    needles: list[str]
    extractive: bool = False
    requests: list[str] = Field(default_factory=list)
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "instant"

    @property
    def seen(self) -> set[str]:
        return {needle for needle in self.needles if any(needle in text for text in self.requests)}

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **_: Any
    ) -> ChatResult:
        self.calls += 1
        text = "\n".join(str(m.content) for m in messages)
        if not self.extractive:
            self.requests.append(text)
            return ChatResult(
                generations=[ChatGeneration(message=AIMessage("Summary of the earlier turns."))]
            )
        found = [needle for needle in self.needles if needle in text]
        self.requests.append("; ".join(found))
        return ChatResult(generations=[ChatGeneration(message=AIMessage("Summary: " + "; ".join(found)))])


def _ms(seconds: float) -> float:
    return seconds * 1000.0


def _median(samples: list[float]) -> float:
    return statistics.median(samples)


def exact_input(messages: Sequence[BaseMessage], budget: Budget) -> int:
    """Exact cl100k tokens of a request of `messages`, with the fixed overhead."""
    exact = TokenCounter(TiktokenText())
    return exact.count_messages(messages) + budget.overhead_tokens


async def our_compaction(
    messages: list[BaseMessage], tokens: list[int], counter: TokenCounter, summarizer: InstantSummarizer
) -> list[BaseMessage]:
    """The compaction path over cached counts: decision, split, chunks, summaries, checkpoint."""
    budget = budget_for(PROFILE)
    events: list[TurnEvent] = []
    request = request_at_trigger(messages, tokens, counter, budget, events.append)
    assert request.estimate.effective >= budget.trigger
    compactor = SummaryCompactor(summarizer, conversation_id=1, checkpoint_message_id=2)
    outcome = await compactor(request)
    assert outcome.messages is not None, outcome.record
    return outcome.messages


def langchain_middleware(model: InstantModel) -> SummarizationMiddleware:
    return SummarizationMiddleware(model, trigger=("tokens", TRIGGER), keep=("tokens", KEEP))


async def replay_ours(messages: list[BaseMessage], needles: list[str]) -> tuple[int, int, int]:
    """Feed the conversation one message at a time, the guard before every model call."""
    summarizer = InstantSummarizer(needles, extractive=True)
    counter = TokenCounter.for_profile(PROFILE)
    guard = UnifiedContextGuard(
        PROFILE,
        budget_for(PROFILE),
        emit=lambda _: None,
        summary_compactor=SummaryCompactor(summarizer, conversation_id=1),
        counter=counter,
    )
    state: list[BaseMessage] = []
    shown: list[BaseMessage] = []
    for message in messages:
        if isinstance(message, AIMessage):
            update = await guard({"messages": state})
            if "messages" in update:
                state = list(add_messages(state, update["messages"]))
            shown = update["llm_input_messages"]
        state.append(message)
    final = "\n".join(m.text for m in shown)
    return len(summarizer.seen), sum(needle in final for needle in needles), summarizer.calls


def replay_langchain(messages: list[BaseMessage], needles: list[str]) -> tuple[int, int, int]:
    model = InstantModel(needles=needles, extractive=True)
    middleware = langchain_middleware(model)
    state: list[BaseMessage] = []
    for message in messages:
        if isinstance(message, AIMessage):
            update = middleware.before_model({"messages": state}, None)  # type: ignore[arg-type]
            if update:
                written = update["messages"]
                assert isinstance(written[0], RemoveMessage) and written[0].id == REMOVE_ALL_MESSAGES
                state = list(written[1:])
        state.append(message)
    final = "\n".join(m.text for m in state)
    return len(model.seen), sum(needle in final for needle in needles), model.calls


async def measure(name: str) -> dict[str, Any]:
    started = time.perf_counter()
    messages = load(name)
    needles = [key for _, _, key in workload_module().NEEDLES]
    print(f"\n{name}: {len(messages):,} messages (loaded in {time.perf_counter() - started:.1f} s)")
    budget = budget_for(PROFILE)
    figures: dict[str, Any] = {}
    repeats = REPEATS[name]

    # Cold: a counter that has never seen these messages (one tiktoken pass), then the path.
    cold_counter = TokenCounter.for_profile(PROFILE)
    cold_started = time.perf_counter()
    tokens = [cold_counter.count_message(m).tokens for m in messages]
    counted = time.perf_counter() - cold_started
    await our_compaction(messages, tokens, cold_counter, InstantSummarizer(needles))
    figures["cold"] = time.perf_counter() - cold_started
    figures["count_pass"] = counted

    ours, theirs = [], []
    summarizer = InstantSummarizer(needles)
    model = InstantModel(needles=needles)
    middleware = langchain_middleware(model)
    result: list[BaseMessage] = []
    update: dict[str, Any] | None = None
    reached: set[str] = set()
    their_reached: set[str] = set()
    for _ in range(repeats):  # interleaved, so a busy neighbour slows both alike
        begin = time.perf_counter()
        result = await our_compaction(messages, tokens, cold_counter, summarizer)
        ours.append(time.perf_counter() - begin)
        begin = time.perf_counter()
        update = middleware.before_model({"messages": messages}, None)  # type: ignore[arg-type]
        theirs.append(time.perf_counter() - begin)
        # Between runs, untimed: what reached the summarizers; then let the requests go (a
        # live process does not keep them either).
        reached |= summarizer.seen
        their_reached |= model.seen
        summarizer.requests.clear()
        model.requests.clear()
    figures["ours"], figures["langchain"] = _median(ours), _median(theirs)
    figures["ratio"] = figures["ours"] / figures["langchain"]
    figures["ours_min"], figures["langchain_min"] = min(ours), min(theirs)
    figures["ratio_min"] = figures["ours_min"] / figures["langchain_min"]
    figures["recall_ours"] = len(reached)
    figures["recall_langchain"] = len(their_reached)
    figures["summarizer_calls"] = summarizer.calls // repeats
    figures["after_exact"] = exact_input(result, budget)
    assert update is not None
    figures["langchain_after_exact"] = exact_input(update["messages"][1:], budget)
    figures["history_tokens"] = sum(tokens)

    print(f"  history: {sum(tokens):,} cl100k tokens (exact, framing included)")
    print(f"  {'':48}{'median':>10}{'best':>10}")
    print(
        f"  LangChain SummarizationMiddleware.before_model  {_ms(figures['langchain']):10.1f}"
        f"{_ms(figures['langchain_min']):10.1f} ms"
    )
    print(
        f"  ours, warm (cached counts)                      {_ms(figures['ours']):10.1f}"
        f"{_ms(figures['ours_min']):10.1f} ms   {figures['summarizer_calls']} chunk calls, "
        "whole history summarized"
    )
    print(
        f"  ours, cold (one tiktoken pass + the path)        {_ms(figures['cold']):10.1f} ms   "
        f"of which the count pass {_ms(counted):.1f} ms"
    )
    print(f"  ratio ours / LangChain{'':26}{figures['ratio']:10.2f}{figures['ratio_min']:10.2f}")
    print(
        f"  recall (needles reaching a summarizer request): ours {figures['recall_ours']}/8, "
        f"LangChain {figures['recall_langchain']}/8"
    )
    print(
        f"  model input after compaction, exact tokens + {budget.overhead_tokens:,} overhead: ours "
        f"{figures['after_exact']:,} (keep {KEEP:,}), LangChain {figures['langchain_after_exact']:,}"
    )

    if name in REPLAY:
        begin = time.perf_counter()
        reached, kept, calls = await replay_ours(messages, needles)
        ours_replay = time.perf_counter() - begin
        begin = time.perf_counter()
        their_reached, their_kept, their_calls = replay_langchain(messages, needles)
        their_replay = time.perf_counter() - begin
        figures["replay_ours"] = reached
        figures["replay_langchain"] = their_reached
        print(
            f"  live replay (hook before every model call): ours {reached}/8 reached a summarizer, "
            f"{kept}/8 still in the final model input ({calls} summarizer calls, {ours_replay:.1f} s);\n"
            f"    LangChain {their_reached}/8 reached, {their_kept}/8 kept ({their_calls} calls, "
            f"{their_replay:.1f} s)"
        )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="W200 and W2000 only")
    parser.add_argument("workloads", nargs="*", help=f"only these of {', '.join(REPEATS)}")
    args = parser.parse_args()
    unknown = set(args.workloads) - set(REPEATS)
    if unknown:
        parser.error(f"unknown workloads: {', '.join(sorted(unknown))}")
    names = args.workloads or (["W200", "W2000"] if args.quick else ["W200", "W2000", "W20000"])
    print(f"compaction benchmark: {os.cpu_count()} cores, langchain {langchain.__version__}")
    print(f"trigger {TRIGGER:,}, keep {KEEP:,}, instant summarizers; medians of interleaved runs")
    results = {name: asyncio.run(measure(name)) for name in names}

    print("\ntargets")
    for name in ("W2000", "W20000"):
        if name in results:
            ratio, best = results[name]["ratio"], results[name]["ratio_min"]
            print(
                f"  {name}: ours <= 0.5x LangChain: median {ratio:.2f}x {verdict(ratio <= 0.5)}, "
                f"best-of-run {best:.2f}x {verdict(best <= 0.5)}"
            )
    if "W20000" in results and "W2000" in results:
        growth = results["W20000"]["ours"] / results["W2000"]["ours"]
        size = results["W20000"]["history_tokens"] / results["W2000"]["history_tokens"]
        print(f"  linear growth: time x{growth:.1f} for history x{size:.1f} {verdict(growth <= 1.5 * size)}")
    for name, figures in results.items():
        extra = figures["cold"] - figures["count_pass"]
        print(
            f"  {name}: cold = one tiktoken pass ({_ms(figures['count_pass']):,.0f} ms) + the path "
            f"({_ms(extra):,.1f} ms, warm {_ms(figures['ours']):,.1f} ms) "
            f"{verdict(extra <= 2 * figures['ours'] + 0.005)}"
        )
    for name, figures in results.items():
        recall = figures["recall_ours"] == 8 and figures.get("replay_ours", 8) == 8
        fits = figures["after_exact"] <= KEEP
        replay = " + replay" if "replay_ours" in figures else ""
        print(
            f"  {name}: recall 8/8 single{replay} {verdict(recall)}; "
            f"input after compaction {figures['after_exact']:,} <= keep {verdict(fits)}"
        )


if __name__ == "__main__":
    main()
