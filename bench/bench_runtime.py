"""Runtime overhead and memory: one turn through ChatShell (empty guard) vs a bare ChatOpenAI.

    python -m bench.bench_runtime [--quick]

Against the scripted OpenAI-compatible provider, served in this process and event loop, so the
provider's own work is identical in both paths and every difference is client-side work:

- time to first token (median over N turns): request start -> first text delta;
- per-token cost: (first -> last text delta) / tokens, on a long streamed reply;
- both as wall time and as CPU time of this process (the provider's share is the same in both
  paths, so the CPU difference is the runtime's own work even on a busy machine);
- resident memory after 100 and after 1,000 sequential turns (a leak of threads,
  checkpoints or compiled graphs would grow it).

Targets (issue 3): TTFT overhead <= 15 ms, per-token overhead <= 0.2 ms, RSS ratio <= 1.05.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from langchain_core.messages import BaseMessageChunk, HumanMessage
from langchain_core.runnables import Runnable

from chat_shell.contracts import TurnRequest, UserInput
from chat_shell.providers.openai import ProviderConfig, create_chat_model
from chat_shell.runtime import ChatShell, RuntimeConfig
from tests.support.report_tool import with_report_tool
from tests.support.scripted_provider import ScriptedProvider, text, tool_call
from tests.support.servers import serve

LONG_REPLY = " ".join(f"word{i % 97}" for i in range(1000))


def _request(turn_id: int, content: str) -> TurnRequest:
    return TurnRequest(
        conversation_id=1,
        owner_id=1,
        turn_id=turn_id,
        assistant_message_id=2 * turn_id,
        user=UserInput(message_id=2 * turn_id - 1, content=content),
        history=[],
    )


@dataclass(frozen=True)
class Sample:
    ttft_ms: float
    ttft_cpu_ms: float
    # From the first to the last text piece: wall time, and CPU time of this process.
    stream_ms: float
    stream_cpu_ms: float
    pieces: int


async def _timed(stream: AsyncIterator[str]) -> Sample:
    start, start_cpu = time.perf_counter(), time.process_time()
    first = last = first_cpu = last_cpu = 0.0
    pieces = 0
    async for piece in stream:
        if not piece:
            continue
        last, last_cpu = time.perf_counter(), time.process_time()
        if not pieces:
            first, first_cpu = last, last_cpu
        pieces += 1
    return Sample(
        ttft_ms=(first - start) * 1000,
        ttft_cpu_ms=(first_cpu - start_cpu) * 1000,
        stream_ms=(last - first) * 1000,
        stream_cpu_ms=(last_cpu - first_cpu) * 1000,
        pieces=pieces,
    )


async def _bare_stream(model: Runnable[Any, BaseMessageChunk], content: str) -> AsyncIterator[str]:
    async for chunk in model.astream([HumanMessage(content)]):
        yield chunk.content if isinstance(chunk.content, str) else ""


async def _runtime_stream(shell: ChatShell, turn_id: int, content: str) -> AsyncIterator[str]:
    async for event in shell.run(_request(turn_id, content)):
        if event.type == "message.delta":
            yield event.text
        elif event.type in ("turn.failed", "turn.cancelled"):
            raise RuntimeError(f"benchmark turn ended {event.type}")


async def _samples(
    runs: int,
    provider: ScriptedProvider,
    reply: str,
    measure: Callable[[int], Awaitable[Sample]],
) -> list[Sample]:
    results = []
    for index in range(runs):
        provider.reset()
        provider.script(text(reply))
        results.append(await measure(index))
    return results


def _rss_mb() -> float:
    gc.collect()
    return psutil.Process(os.getpid()).memory_info().rss / 2**20


def _overheads(
    what: str, sample: str, medians: dict[tuple[str, str], float], *, digits: int, target_ms: float
) -> None:
    """One line per clock: the bare and runtime medians in ms, the overhead against its target."""
    for kind in ("wall", "cpu"):
        bare, runtime = medians[("bare", kind)], medians[("runtime", kind)]
        print(
            f"{what}, {kind} time ({sample}): bare {bare:.{digits}f} ms, "
            f"runtime {runtime:.{digits}f} ms, overhead {runtime - bare:.{digits}f} ms "
            f"(target <= {target_ms:g} ms), ratio {runtime / bare:.2f}x"
        )


async def main(quick: bool) -> None:
    provider = ScriptedProvider()
    async with serve(provider.app) as url:
        config = RuntimeConfig(provider=ProviderConfig(base_url=f"{url}/v1", max_retries=0), model="gpt-4o")
        shell = ChatShell(config, tools=with_report_tool())
        turn_ids = iter(range(1, 10**9))

        # The same request the runtime sends (tools bound), straight through ChatOpenAI.astream.
        bare_model = create_chat_model(shell.profile(), config.provider).bind_tools(shell.tools.tools)

        async def bare(_: int) -> Sample:
            return await _timed(_bare_stream(bare_model, "How are the sales?"))

        async def runtime(_: int) -> Sample:
            return await _timed(_runtime_stream(shell, next(turn_ids), "How are the sales?"))

        # Warm both paths (imports, connection pool, compiled graph) before measuring.
        await _samples(5, provider, "warm up", bare)
        await _samples(5, provider, "warm up", runtime)

        runs = 15 if quick else 60
        ttft: dict[str, list[Sample]] = {"bare": [], "runtime": []}
        for _ in range(runs):  # interleaved, so machine noise hits both alike
            ttft["bare"] += await _samples(1, provider, "Sales are up 4 percent.", bare)
            ttft["runtime"] += await _samples(1, provider, "Sales are up 4 percent.", runtime)
        first_token = {
            (name, kind): statistics.median(s.ttft_ms if kind == "wall" else s.ttft_cpu_ms for s in samples)
            for name, samples in ttft.items()
            for kind in ("wall", "cpu")
        }

        long_runs = 3 if quick else 9
        stream_bare: list[Sample] = []
        stream_runtime: list[Sample] = []
        for _ in range(long_runs):
            stream_bare += await _samples(1, provider, LONG_REPLY, bare)
            stream_runtime += await _samples(1, provider, LONG_REPLY, runtime)
        per_token = {
            (name, kind): statistics.median(
                (s.stream_ms if kind == "wall" else s.stream_cpu_ms) / s.pieces for s in samples
            )
            for name, samples in (("bare", stream_bare), ("runtime", stream_runtime))
            for kind in ("wall", "cpu")
        }

        first, total = (20, 200) if quick else (100, 1000)
        rss_first = rss_total = 0.0
        for turn in range(1, total + 1):
            provider.reset()
            if turn % 2:
                provider.script(tool_call("generate_report", {"rows": 20, "seed": turn}), text("Done."))
            else:
                provider.script(text("A short answer."))
            async for _ in shell.run(_request(next(turn_ids), f"turn {turn}")):
                pass
            if turn == first:
                rss_first = _rss_mb()
        rss_total = _rss_mb()
        leftover = await shell.checkpoint_count()
        provider.close()

    print(f"runtime benchmark ({'quick' if quick else 'full'}), scripted provider in-process, empty guard")
    _overheads("time to first token", f"median of {runs}", first_token, digits=2, target_ms=15)
    pieces = stream_runtime[0].pieces
    _overheads("per token", f"{pieces} pieces, median of {long_runs}", per_token, digits=4, target_ms=0.2)
    print(
        f"resident memory: after {first} turns {rss_first:.1f} MB, after {total} turns {rss_total:.1f} MB, "
        f"ratio {rss_total / rss_first:.3f} (target <= 1.05); checkpoints left: {leftover}"
    )


if __name__ == "__main__":
    os.environ.setdefault(
        "TIKTOKEN_CACHE_DIR", str(Path(__file__).resolve().parent.parent / ".cache" / "tiktoken")
    )
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run with fewer samples")
    asyncio.run(main(parser.parse_args().quick))
