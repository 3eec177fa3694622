"""Operators: the dashboard's SQL aggregates at scale, and what telemetry costs a turn.

    python -m bench.bench_operators [--quick]

1. Dashboard queries over 100,000 stored assistant messages (each with its turn row and final
   context snapshot, 2,000 conversations over 30 days) and 25,000 compaction rows, on SQLite
   and on PostgreSQL: `GET /api/metrics/summary` for each window (every query it runs, all
   rows of the 30-day window included) and one conversation's drill-down. The stored rows'
   hourly rollups are written by the service's own staging (`services.dashboard.rollups`), which the
   7- and 30-day windows read. Median of several runs each; target <= 300 ms (issue 10).
2. Telemetry enabled versus disabled, per turn of ChatShell against the scripted provider (in
   its own process, so only the runtime's work is measured), each mode in its own child
   processes (the SDK can be installed once per process). Enabled means the backend's SDK
   setup with spans batched to an exporter and metrics read for Prometheus. Measured two ways:
   CPU time in alternating children (its median ratio moves by a few percent from run to run
   on a shared virtual machine, as much as the effect itself), and instructions counted by
   valgrind, which are the same for the same work; the verdict uses the count when valgrind
   is installed. The turn is a short question and reply, so the fixed per-turn telemetry
   work weighs the most. Target: at most 3% more per turn.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path

from sqlalchemy import insert

from backend.db import create_engine, session_factory
from backend.models import User
from backend.models.base import utcnow
from backend.services.dashboard import aggregates, pressure
from bench.common import row, timed
from tests.support import databases
from tests.support.dashboard import StoredCompaction, StoredTurn, store_metrics
from tests.support.servers import free_port

TARGET_MS = 300.0
CPU_TARGET = 1.03
WARMUP_TURNS = 10
CACHEGRIND = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
ROOT = Path(__file__).resolve().parent.parent


# -- 1. dashboard queries ------------------------------------------------------------------


def _conversation(rng: random.Random, turns: int, now) -> tuple[list[StoredTurn], list[StoredCompaction]]:  # type: ignore[no-untyped-def]
    start = now - timedelta(days=30) + timedelta(seconds=rng.uniform(0, 29 * 86400))
    span = (now - start).total_seconds()
    stored, compactions = [], []
    used = rng.randint(500, 3_000)
    for index in range(turns):
        at = start + timedelta(seconds=span * index / turns)
        used = min(int(used * rng.uniform(1.05, 1.4)), 9_000)
        refused = used > 8_000 and rng.random() < 0.1
        stored.append(
            StoredTurn(
                at,
                used=used,
                available=7_000,
                ttft_ms=rng.lognormvariate(5.5, 0.5),
                refused=refused,
                overflow_errors=int(rng.random() < 0.01),
                status="failed" if refused else "completed",
                reason="context_refused" if refused else "normal_completion",
            )
        )
        if used > 5_950:
            ok = rng.random() < 0.93
            compactions.append(
                StoredCompaction(
                    at,
                    status="completed" if ok else "fallback",
                    before=used,
                    after=used // 3,
                    duration_ms=rng.lognormvariate(7, 0.6),
                    retention=rng.uniform(0.7, 1.0) if ok else None,
                    failure_reason=None if ok else "timeout",
                )
            )
            used = used // 3
    return stored, compactions


async def _seed(url: str, messages: int) -> int:
    """Stores `messages` assistant messages (and their user messages and turns); returns the
    id of a busy conversation for the drill-down."""
    rng = random.Random(10)
    now = utcnow()
    engine = create_engine(url)
    per_conversation = 50
    chosen = 0
    compaction_rows = 0
    try:
        async with session_factory(engine)() as db, db.begin():
            await db.execute(insert(User), [{"username": "bench", "password_hash": "x"}])
        conversations = messages // per_conversation
        for _ in range(0, conversations, 50):
            async with session_factory(engine)() as db, db.begin():
                for _ in range(50):
                    turns, compactions = _conversation(rng, per_conversation, now)
                    compaction_rows += len(compactions)
                    chosen = await store_metrics(db, "bench", turns, compactions)
        async with engine.connect() as connection:
            # What PostgreSQL's autovacuum does after a bulk load (visibility map, statistics).
            if connection.dialect.name == "postgresql":
                await connection.execution_options(isolation_level="AUTOCOMMIT")
                await connection.exec_driver_sql("VACUUM ANALYZE")
    finally:
        await engine.dispose()
    print(f"  stored {messages:,} assistant messages, {compaction_rows:,} compaction rows", flush=True)
    return chosen


async def _time(fn: Callable[[], Awaitable[object]], repeat: int) -> tuple[float, float]:
    """Median wall ms and median CPU ms of this process (SQLite works in-process; for
    PostgreSQL the CPU is the client's share only)."""
    timings = await timed(fn, repeat, warmup=1)
    return timings.median, statistics.median(timings.cpu)


async def _measure(
    url: str, label: str, conversation_id: int, repeat: int
) -> list[tuple[str, tuple[float, float]]]:
    engine = create_engine(url)
    results = []
    try:
        sessions = session_factory(engine)
        for window in ("1h", "24h", "7d", "30d"):

            async def summary(window: str = window) -> None:
                await aggregates.summary(sessions, window)

            results.append((f"{label} summary {window}", await _time(summary, repeat)))

        async def detail() -> None:
            async with sessions() as db:
                await pressure.conversation_detail(db, conversation_id)

        results.append((f"{label} conversation drill-down", await _time(detail, repeat)))
    finally:
        await engine.dispose()
    return results


def dashboard_queries(messages: int, repeat: int) -> list[tuple[str, tuple[float, float]]]:
    results: list[tuple[str, tuple[float, float]]] = []
    with tempfile.TemporaryDirectory() as directory:
        url = databases.sqlite_copy(databases.sqlite_template(Path(directory)), Path(directory))
        print("SQLite:", flush=True)
        chosen = asyncio.run(_seed(url, messages))
        results += asyncio.run(_measure(url, "SQLite", chosen, repeat))
    with databases.scratch_postgres() as url:
        if url is None:
            print(f"PostgreSQL not reachable at {databases.POSTGRES_ADMIN_URL}: skipped", flush=True)
            return results
        databases.migrate(url)
        print("PostgreSQL:", flush=True)
        chosen = asyncio.run(_seed(url, messages))
        results += asyncio.run(_measure(url, "PostgreSQL", chosen, repeat))
    return results


# -- 2. telemetry CPU overhead -------------------------------------------------------------


def _shell(base_url: str, enabled: bool):  # type: ignore[no-untyped-def]
    """The runtime against the scripted provider, with the backend's SDK setup when enabled."""
    # Both modes import the same modules (the backend always does): only the installation
    # differs, so a bigger heap of imported modules is not counted as telemetry's cost.
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from backend.settings import Settings
    from backend.telemetry import setup_telemetry
    from bench.telemetry_sink import DiscardingExporter
    from chat_shell.providers.openai import ProviderConfig
    from chat_shell.runtime import ChatShell, RuntimeConfig

    if enabled:
        telemetry = setup_telemetry(
            Settings(_env_file=None, telemetry_enabled=True),  # type: ignore[call-arg]
            span_processors=[BatchSpanProcessor(DiscardingExporter())],
        )
        assert telemetry is not None
    return ChatShell(
        RuntimeConfig(provider=ProviderConfig(base_url=base_url, api_key="k", max_retries=0), model="gpt-4o")
    )


async def _turns(shell, first_id: int, count: int) -> list:  # type: ignore[no-untyped-def]
    from tests.support.turns import collect, make_request

    events: list = []
    for turn_id in range(first_id, first_id + count):
        events = await collect(shell, make_request(turn_id, "How are the sales?"))
    return events


async def _counted_turns(base_url: str, turns: int, enabled: bool) -> None:
    """The work whose instructions valgrind counts: warm-up turns, then `turns` more."""
    shell = _shell(base_url, enabled)
    await _turns(shell, 1, WARMUP_TURNS + turns)


async def _turns_cpu(base_url: str, turns: int, enabled: bool) -> dict[str, float]:
    """CPU ms of this process per turn (median of batches), after warm-up turns."""
    shell = _shell(base_url, enabled)
    events = await _turns(shell, 1, WARMUP_TURNS)
    batches = []
    per_batch = max(1, turns // 5)
    for batch in range(5):
        start = time.process_time()
        await _turns(shell, WARMUP_TURNS + 1 + batch * per_batch, per_batch)
        batches.append((time.process_time() - start) * 1000 / per_batch)
    result = {"cpu_ms_per_turn": statistics.median(batches)}
    if enabled:
        from prometheus_client import generate_latest

        from backend.telemetry import installed

        telemetry = installed()
        assert telemetry is not None and b"chat_shell_turns_total" in generate_latest(telemetry.registry)
        result["telemetry_us_per_turn"] = await _telemetry_work_us(shell, events[-1])
    return result


async def _telemetry_work_us(shell, terminal) -> float:  # type: ignore[no-untyped-def]
    """CPU microseconds of our own telemetry work for one turn with one model call, repeated
    in a loop (turn span, model-call span with its metrics, the terminal event's metrics)."""
    from langchain_core.messages import AIMessage, HumanMessage

    from chat_shell.accounting.budget import budget_for
    from chat_shell.contracts import TurnEvent
    from chat_shell.observability.turn_telemetry import TurnTelemetry
    from chat_shell.providers.model_spans import model_call
    from tests.support.turns import make_request

    request = make_request(1, "How are the sales?")
    profile = shell.profile()
    budget = budget_for(profile)
    reply = AIMessage(
        "Sales are up.",
        usage_metadata={"input_tokens": 120, "output_tokens": 5, "total_tokens": 125},
        response_metadata={"model_name": "gpt-4o", "finish_reason": "stop", "id": "chatcmpl-1"},
    )
    messages = [HumanMessage("How are the sales?")]

    loops = 2_000
    start = time.process_time()
    for _ in range(loops):
        telemetry = TurnTelemetry(request, profile, budget, default_model="gpt-4o")

        async def one_call() -> AsyncIterator[TurnEvent]:
            with model_call("answer", "gpt-4o", 16_384, messages) as call:
                assert call is not None
                call.succeeded(reply)
            yield terminal

        async for _ in telemetry.observe_turn(one_call()):
            pass
    return (time.process_time() - start) * 1_000_000 / loops


def _child(mode: str, turns: int, port: int, *, instructions: bool = False) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bench.bench_operators",
        "--instructions-child" if instructions else "--child",
        mode,
        "--turns",
        str(turns),
        "--base-url",
        f"http://127.0.0.1:{port}/v1",
    ]


def _timed_rounds(port: int, env: dict[str, str], turns: int, rounds: int) -> dict[str, float]:
    """Alternating child processes (ABBA order), CPU per turn in each; the overhead is the
    median of the paired ratios, so slow drifts of a shared machine cancel out."""
    figures: dict[str, list[float]] = {"disabled": [], "enabled": [], "work": []}
    for number in range(rounds):
        for mode in ("disabled", "enabled") if number % 2 == 0 else ("enabled", "disabled"):
            out = subprocess.run(
                _child(mode, turns, port), cwd=ROOT, env=env, check=True, capture_output=True, text=True
            )
            child = json.loads(out.stdout.strip().splitlines()[-1])
            figures[mode].append(child["cpu_ms_per_turn"])
            if "telemetry_us_per_turn" in child:
                figures["work"].append(child["telemetry_us_per_turn"])
    ratios = sorted(e / d for e, d in zip(figures["enabled"], figures["disabled"], strict=True))
    return {
        "disabled_ms": statistics.median(figures["disabled"]),
        "enabled_ms": statistics.median(figures["enabled"]),
        "ratio": statistics.median(ratios),
        "ratio_low": ratios[len(ratios) // 4],
        "ratio_high": ratios[(3 * len(ratios)) // 4],
        "work_us": statistics.median(figures["work"]),
    }


def _instructions_per_turn(port: int, env: dict[str, str], turns: int) -> dict[str, float] | None:
    """Instructions per turn in each mode, counted by valgrind (cachegrind without its cache
    simulation): the same count for the same work whatever else the machine does. Each mode
    runs once with no measured turns and once with `turns` of them; the difference is the
    turns' own count, without start-up and warm-up."""
    if shutil.which("valgrind") is None:
        return None
    # Dict and set layouts follow the hash seed; one seed for every run keeps them identical.
    env = {**env, "PYTHONHASHSEED": "0"}
    counts: dict[tuple[str, int], int] = {}
    for mode in ("disabled", "enabled"):
        runs = {
            count: subprocess.Popen(
                [*CACHEGRIND, *_child(mode, count, port, instructions=True)],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for count in (0, turns)
        }
        for count, run in runs.items():
            _, stderr = run.communicate()
            if run.returncode != 0:
                raise RuntimeError(f"the instruction-count child failed:\n{stderr[-2000:]}")
            counts[mode, count] = _instruction_refs(stderr)
    per_turn = {mode: (counts[mode, turns] - counts[mode, 0]) / turns for mode in ("disabled", "enabled")}
    return {**per_turn, "ratio": per_turn["enabled"] / per_turn["disabled"]}


def _instruction_refs(valgrind_output: str) -> int:
    """The total of cachegrind's summary line `==pid== I   refs:      8,231,569,113`."""
    found = re.search(r"I\s+refs:\s+([\d,]+)", valgrind_output)
    if found is None:
        raise RuntimeError("valgrind printed no instruction count")
    return int(found.group(1).replace(",", ""))


def telemetry_overhead(turns: int, rounds: int) -> tuple[dict[str, float], dict[str, float] | None]:
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_METRICS_EXPORTER": "none",
    }
    provider = subprocess.Popen(
        [sys.executable, "-m", "tests.support.scripted_provider", "--port", str(port)], cwd=ROOT, env=env
    )
    try:
        _wait_for(port)
        return _timed_rounds(port, env, turns, rounds), _instructions_per_turn(port, env, turns)
    finally:
        provider.terminate()
        provider.wait(10)


def _wait_for(port: int) -> None:
    import socket

    for _ in range(200):
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError("the scripted provider did not start")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child", choices=["disabled", "enabled"])
    parser.add_argument("--instructions-child", choices=["disabled", "enabled"])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--base-url")
    args = parser.parse_args()
    if args.child:
        # Both modes on the same core: fewer migrations and cache effects between the pairs.
        if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > 1:
            os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
        print(json.dumps(asyncio.run(_turns_cpu(args.base_url, args.turns, args.child == "enabled"))))
        return
    if args.instructions_child:
        asyncio.run(_counted_turns(args.base_url, args.turns, args.instructions_child == "enabled"))
        return

    messages = 20_000 if args.quick else 100_000
    print(f"== dashboard aggregates over {messages:,} stored assistant messages ==", flush=True)
    results = dashboard_queries(messages, repeat=3 if args.quick else 7)
    print(f"(load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    row("query", "median ms", "CPU ms", "target ms", "ratio")
    for label, (ms, cpu) in results:
        row(label, f"{ms:.1f}", f"{cpu:.1f}", f"{TARGET_MS:.0f}", f"{ms / TARGET_MS:.2f}")
    worst = max(ms for _, (ms, _) in results)
    verdict = "within" if worst <= TARGET_MS else "OVER"
    print(f"slowest: {worst:.1f} ms ({verdict} the {TARGET_MS:.0f} ms target)")

    turns, rounds = (40, 2) if args.quick else (100, 10)
    print(f"\n== telemetry cost per turn ({rounds} alternating rounds of {turns} turns each) ==", flush=True)
    timed, counted = telemetry_overhead(turns, rounds)
    row("CPU time, telemetry disabled (median)", f"{timed['disabled_ms']:.2f} ms")
    row("CPU time, telemetry enabled (median)", f"{timed['enabled_ms']:.2f} ms")
    row(
        "CPU time enabled / disabled",
        f"{timed['ratio']:.3f}",
        f"IQR {timed['ratio_low']:.2f}-{timed['ratio_high']:.2f}",
    )
    work_share = timed["work_us"] / 1000 / timed["disabled_ms"]
    row("our telemetry work per turn (isolated)", f"{timed['work_us']:.0f} us", f"{work_share:.1%} of turn")
    if counted is None:
        print("valgrind is not installed (Debian package `valgrind`): instruction counts skipped")
        ratio = timed["ratio"]
    else:
        row("instructions per turn, disabled", f"{counted['disabled'] / 1e6:.3f} M")
        row("instructions per turn, enabled", f"{counted['enabled'] / 1e6:.3f} M")
        row("instructions enabled / disabled", f"{counted['ratio']:.4f}", f"max {CPU_TARGET:.2f}")
        # The count is exact where the timed ratio moves by a few percent between runs.
        ratio = counted["ratio"]
    verdict = "within" if ratio <= CPU_TARGET else "OVER"
    print(f"telemetry overhead: {(ratio - 1) * 100:+.1f}% ({verdict} the 3% target)")


if __name__ == "__main__":
    main()
