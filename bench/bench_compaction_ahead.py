"""Compaction ahead of time (issue 20): the turn after the trigger starts as fast as any other.

    python -m bench.bench_compaction_ahead            # scripted summarizer, then the local model
    python -m bench.bench_compaction_ahead --quick    # the scripted summarizer only
    python -m bench.bench_compaction_ahead --only local

The whole backend (package mode, SQLite) runs one conversation turn by turn; each turn's time
to first token is measured by the client, from the send to the first `message.delta` on the
turn's stream, so a wait for a compaction (inline, or a background job still running) counts.
Between turns the user reads: the think time lasts until no compaction job runs any more (what
"idle time after a turn" means), plus 0.2 s. Ratio: TTFT of the turn after the conversation
crosses the (pre-)trigger, over the median TTFT of the conversation's ordinary turns (no
compaction in them or just before them; the first turn left out). Inline, that turn waits for
the whole summary; ahead of time it starts from the checkpoint the background job made.

- scripted: the scripted provider answers chat requests after 0.5 s (a hosted model's first
  token) and summary requests after 5 s; trigger 3,000, keep 1,500, a turn adds about 450 tokens.
  Run inline, ahead with the default pre-trigger (0.7 x trigger) and ahead with 0.9 x trigger,
  each over the same 24 turns, counting compactions and summarizer calls. Target: ahead <= 1.2x.
- local: the embedded default model (qwen2.5-coder-1.5b, 4k window) as model and summarizer,
  inline and ahead, each until the first turn after the first compaction (at most 16 turns).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import func, select

from backend.app import create_app
from backend.local_model.catalog import DEFAULT_MODEL
from backend.models import CompactionEvent
from backend.settings import Settings
from bench.common import row, verdict
from chat_shell.contracts import SUMMARY_STRATEGIES
from tests.support import databases
from tests.support.api import new_user
from tests.support.local_model import local_model_ready
from tests.support.scripted_provider import Reply, ScriptedProvider, text
from tests.support.servers import serve
from tests.support.sse import read_stream
from tests.support.texts import SMALL_COMPACTION, WORDS

TARGET_RATIO = 1.2
SUMMARY_SECONDS = 5.0
FIRST_TOKEN_SECONDS = 0.5
SCRIPTED_TURNS = 24
LOCAL_TURNS = 16
SCRIPTED_SIZES = {**SMALL_COMPACTION, "summary_timeout_seconds": 60}


@dataclass
class Turn:
    ttft: float
    # The turn summarized inline (its own hook compacted).
    inline: bool
    # A compaction ahead of time was stored during the think time before this turn.
    after_ahead: bool


@dataclass
class Run:
    label: str
    turns: list[Turn] = field(default_factory=list)
    compactions: int = 0
    # Summarizer calls (scripted: requests the provider got; local: chunks the records report).
    summarizer_calls: int = 0

    @property
    def ordinary(self) -> float:
        ttfts = [
            t.ttft
            for i, t in enumerate(self.turns)
            if i > 0 and not (t.inline or t.after_ahead or self.turns[i - 1].inline)
        ]
        return statistics.median(ttfts)

    @property
    def after_trigger(self) -> Turn | None:
        return next((t for t in self.turns if t.inline or t.after_ahead), None)


async def _turn(client: httpx.AsyncClient, cid: int, content: str) -> tuple[float, list[Any]]:
    start = time.perf_counter()
    response = await client.post(f"/api/conversations/{cid}/messages", json={"content": content})
    assert response.status_code == 202, response.text
    turn_id = response.json()["turn_id"]
    first = await read_stream(
        client, cid, turn_id=turn_id, until=lambda events: events[-1].event == "message.delta"
    )
    ttft = time.perf_counter() - start
    assert first.terminal is None, first.events[-1]
    rest = await read_stream(client, cid, turn_id=turn_id, after=first.events[-1].seq)
    assert rest.terminal is not None and rest.terminal.event == "turn.completed", rest.events[-1:]
    return ttft, [*first.events, *rest.events]


async def _completed(app: Any, cid: int) -> dict[str, int]:
    async with app.state.ctx.sessions() as db:
        found = await db.execute(
            select(CompactionEvent.strategy, func.count())
            .where(CompactionEvent.conversation_id == cid, CompactionEvent.status == "completed")
            .group_by(CompactionEvent.strategy)
        )
        return {strategy: count for strategy, count in found}


async def _chunks(client: httpx.AsyncClient, cid: int) -> int:
    items = (await client.get(f"/api/conversations/{cid}/messages", params={"limit": 200})).json()["items"]
    return sum(
        record.get("chunks") or 0
        for item in items
        for record in (item.get("result") or {}).get("context_compactions") or []
        if record.get("status") == "completed" and record.get("strategy") in SUMMARY_STRATEGIES
    )


async def _conversation(
    settings: Settings,
    label: str,
    turns: int,
    content: Callable[[int], str],
    *,
    stop_after_first: bool,
    provider: ScriptedProvider | None = None,
    ready: Callable[[Any], Awaitable[object]] | None = None,
) -> Run:
    app = create_app(settings)
    run = Run(label)
    async with serve(app) as base_url:
        if ready is not None:
            await ready(app)
        client = await new_user(base_url, "bench")
        client.timeout = httpx.Timeout(900)
        try:
            cid = (await client.post("/api/conversations", json={"title": label})).json()["id"]
            ahead = app.state.ctx.runner.ahead
            made_ahead, after_ahead = 0, False
            for number in range(turns):
                ttft, events = await _turn(client, cid, content(number))
                inline = any(
                    e.event == "context.compaction"
                    and e.data.get("status") == "completed"
                    and e.data.get("strategy") == "summary_compact"
                    for e in events
                )
                run.turns.append(Turn(ttft, inline, after_ahead))
                print(f"  {label}: turn {number + 1} first token {ttft:.2f} s", flush=True)
                if stop_after_first and (inline or after_ahead):
                    break
                # Think time: until no compaction job runs for the conversation.
                if ahead is not None:
                    await ahead.wait(cid, lambda _: None)
                await asyncio.sleep(0.2)
                count = (await _completed(app, cid)).get("summary_ahead", 0)
                after_ahead, made_ahead = count > made_ahead, count
            if ahead is not None:
                await ahead.wait(cid, lambda _: None)
            run.compactions = sum((await _completed(app, cid)).values())
            run.summarizer_calls = len(provider.summary_requests) if provider else await _chunks(client, cid)
        finally:
            await client.aclose()
    return run


def _report(runs: list[Run], *, target: bool) -> None:
    """One row per run; with `target`, the default ahead-of-time run against the TTFT target
    and the inline run's calls (the issue: as many summarizer calls as inline, or fewer)."""
    inline = runs[0]
    row("run", "ordinary (s)", "after trig (s)", "ratio", "compactions", "summ. calls", width=34)
    for run in runs:
        after = run.after_trigger
        ratio = after.ttft / run.ordinary if after is not None else float("nan")
        cells = [f"{run.ordinary:.2f}", f"{after.ttft:.2f}" if after else "-", f"{ratio:.2f}x"]
        cells += [run.compactions, run.summarizer_calls]
        row(run.label, *cells, width=34)
    if not target:
        return
    # The targets are the default configuration's (the other pre-triggers are for comparison).
    run = runs[1]
    after = run.after_trigger
    ratio = after.ttft / run.ordinary if after is not None else float("nan")
    calls = run.summarizer_calls / max(1, inline.summarizer_calls)
    row(
        f"{run.label}: TTFT ratio <= {TARGET_RATIO}x",
        f"{ratio:.2f}x",
        verdict(ratio <= TARGET_RATIO),
        width=48,
    )
    row(f"{run.label}: summarizer calls <= inline", f"{calls:.2f}x", verdict(calls <= 1.0), width=48)


def _settings(url: str, scratch: Path, **values: object) -> Settings:
    return Settings(  # type: ignore[call-arg]
        _env_file=None,
        data_dir=scratch / "data",
        database_url=url,
        telemetry_enabled=False,
        password_hash_profile="CHEAPEST",
        **values,
    )


async def _scripted(scratch: Path, template: Path) -> None:
    provider = ScriptedProvider()
    provider.default_summary = lambda body: text(  # type: ignore[method-assign]
        "Budget 8000 EUR; order ORD-48213.", first_token_delay=SUMMARY_SECONDS
    )
    provider.default_reply = lambda body: Reply(  # type: ignore[method-assign]
        text="Noted, thank you.", first_token_delay=FIRST_TOKEN_SECONDS
    )
    modes: list[tuple[str, dict[str, object]]] = [
        ("inline", {"compaction_ahead": False}),
        ("ahead, pre-trigger 0.7x (default)", {}),
        ("ahead, pre-trigger 0.9x", {"compaction_pre_trigger_tokens": 2_700}),
    ]
    runs = []
    async with serve(provider.app) as provider_url:
        provider.base_url = f"{provider_url}/v1"
        for label, extra in modes:
            provider.reset()
            settings = _settings(
                databases.sqlite_copy(template, scratch),
                scratch,
                local_model="off",
                openai_base_url=provider.base_url,
                **SCRIPTED_SIZES,
                **extra,
            )
            runs.append(
                await _conversation(
                    settings,
                    label,
                    SCRIPTED_TURNS,
                    lambda n: f"Turn {n}: " + WORDS * 40,
                    stop_after_first=False,
                    provider=provider,
                )
            )
        provider.close()
    print(
        f"scripted provider: first token {FIRST_TOKEN_SECONDS} s, summary {SUMMARY_SECONDS} s, "
        f"{SCRIPTED_TURNS} turns of about 450 tokens, trigger 3,000, keep 1,500"
    )
    _report(runs, target=True)


def _log_text(sentences: int, day: int) -> str:
    return " ".join(
        f"Day {day}, entry {n}: the ferry left pier {n + 3} at {8 + n % 9}:{(n * 7) % 60:02d} "
        f"with {40 + n * 3} passengers and {n % 5 + 1} cars."
        for n in range(sentences)
    )


async def _local(scratch: Path, template: Path) -> None:
    runs = []
    for label, extra in (("inline", {"compaction_ahead": False}), ("ahead (0.7x)", {})):
        settings = _settings(
            databases.sqlite_copy(template, scratch),
            scratch,
            local_model=DEFAULT_MODEL,
            max_output_tokens=16,
            summary_timeout_seconds=900,
            provider_timeout_seconds=900,
            **extra,
        )
        runs.append(
            await _conversation(
                settings,
                label,
                LOCAL_TURNS,
                lambda n: f"Keep this travel log in mind. {_log_text(18, n)} Reply with one word: noted.",
                stop_after_first=True,
                ready=local_model_ready,
            )
        )
    print(f"embedded local model {DEFAULT_MODEL} (model and summarizer), until the turn after a compaction")
    _report(runs, target=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the scripted summarizer only")
    parser.add_argument("--only", choices=("scripted", "local"), help="one part only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        scratch = Path(directory)
        template = databases.sqlite_template(scratch)
        if args.only != "local":
            asyncio.run(_scripted(scratch, template))
        if not args.quick and args.only != "scripted":
            asyncio.run(_local(scratch, template))


if __name__ == "__main__":
    main()
