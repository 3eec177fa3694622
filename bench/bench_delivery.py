"""Turn delivery under load (issues 4 and 18).

Three processes: the backend (`chat-shell serve`, SQLite, chat_shell in package mode), the
scripted provider emitting clock tokens at 50 tokens per second per turn, and this process
with the SSE clients. Added delivery latency = client receive time minus the provider's emit
time of each token (both wall clocks of this machine); every stream must be complete and in
order. A stream refused at its opening (503) opens again, as the page's does.

- The load (issue 4): N turns of 500 tokens sent at once (a burst), every token counted.
- The capacity sweep (issue 18): N concurrent replies in a steady state. Client i of N starts
  i/N of a reply's length in and sends again as soon as its reply ends, so replies start and
  end all the time while N stream; latency counts the tokens emitted while all N clients are
  in their replies. It names the largest N that meets both latency targets, with the tokens
  delivered per second and the CPU share (CPU seconds per second of the level: 1.0 is one
  core) of the backend, the provider and the clients. The backend's CPU per delivered token
  bounds what one process can carry, whatever the latency: it is printed as that bound.
- A reconnect replays a turn of many events and is compared with streaming it live.

The load and the sweep then run again with the backend on PostgreSQL, the production
database. Then the production shape (issue 33): one web process that only relays and one
worker (`chat-shell worker`) that runs the turns, on PostgreSQL and Redis. Its sweep prints
each process's CPU share and the replies one core of each carries; then, with the service's
capacity (`CHAT_SHELL_TURN_CAPACITY`) set to the largest level that met the targets, twice
that many clients ask at once: the admitted replies must keep the targets while the rest are
refused with 503 and ask again after its Retry-After, as the page does.
`--quick`: 100-token turns, the 20-turn load and a shorter sweep on each. `--levels 60`: only
those concurrencies in each sweep (with `--split-only`, a short look at one load level).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
from httpx_sse import aconnect_sse

from bench.common import row
from tests.support import databases
from tests.support.api import PASSWORD
from tests.support.processes import BackendProcess, WorkerProcess, backend_env
from tests.support.servers import free_port, private_redis_server

ROOT = Path(__file__).resolve().parent.parent
PROVIDER_TOKENS_PER_SECOND = 50
P50_TARGET_MS = 5.0
P99_TARGET_MS = 50.0
# Concurrencies of the capacity sweep (issue 18 asks for at least 40 on PostgreSQL).
CAPACITY_LEVELS = [10, 20, 40, 60, 80]
QUICK_CAPACITY_LEVELS = [10, 20, 40, 60]
# The production shape's sweep (issue 33 asks for at least 60).
SPLIT_LEVELS = [20, 40, 60, 80]
QUICK_SPLIT_LEVELS = [20, 40, 60]


def _start_provider(port: int, tokens_per_second: float, clock_tokens: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.scripted_provider",
            "--port",
            str(port),
            "--tokens-per-second",
            str(tokens_per_second),
            "--clock-tokens",
            str(clock_tokens),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    for _ in range(200):
        try:
            httpx.get(f"http://127.0.0.1:{port}/_requests", timeout=1)
            return process
        except httpx.TransportError:
            time.sleep(0.05)
    raise RuntimeError("scripted provider did not start")


async def _client(base_url: str) -> httpx.AsyncClient:
    client = httpx.AsyncClient(
        base_url=base_url,
        timeout=120,
        limits=httpx.Limits(max_connections=1000, max_keepalive_connections=1000),
    )
    await client.post("/api/auth/register", json={"username": "loadtester", "password": PASSWORD})
    login = await client.post("/api/auth/login", json={"username": "loadtester", "password": PASSWORD})
    client.headers["X-CSRF-Token"] = login.json()["csrf_token"]
    return client


@dataclass
class Tally:
    """The tokens received, and the added latency (ms) of those emitted within the measured
    window (provider wall clock, ns; the whole load when None)."""

    window: tuple[int, int] | None = None
    tokens: int = 0
    latencies: list[float] = field(default_factory=list)
    # Sends refused past the service's capacity (503 at_capacity), each asked again later.
    refused: int = 0

    def token(self, stamp: int, received: int) -> None:
        self.tokens += 1
        if self.window is None or self.window[0] <= stamp < self.window[1]:
            self.latencies.append((received - stamp) / 1e6)


async def _follow(client: httpx.AsyncClient, cid: int, tally: Tally) -> tuple[int, bool]:
    """Reads one conversation's stream to its terminal event; returns (events, complete and in
    order). As the page does, a stream refused at its opening with 503 (`database_busy`, a
    process past its pool) opens again after its Retry-After."""
    seqs: list[int] = []
    terminal = None
    while True:
        async with aconnect_sse(client, "GET", f"/api/conversations/{cid}/stream") as source:
            if source.response.status_code == 503:
                await asyncio.sleep(float(source.response.headers.get("retry-after", "1")))
                continue
            async for sse in source.aiter_sse():
                if not sse.data:
                    continue
                received = time.time_ns()
                seqs.append(int(sse.id.split(":")[1]))
                if sse.event == "message.delta":
                    for stamp in json.loads(sse.data)["text"].split():
                        tally.token(int(stamp), received)
                if sse.event.startswith("turn.") and sse.event != "turn.started":
                    terminal = sse.event
                    break
        return len(seqs), terminal == "turn.completed" and seqs == list(range(1, len(seqs) + 1))


async def _send(client: httpx.AsyncClient, cid: int, tally: Tally) -> httpx.Response:
    """Sends like the page: a 503 (`database_busy`, `at_capacity`) is retried after its
    Retry-After; the refusals past capacity are counted."""
    while True:
        response = await client.post(f"/api/conversations/{cid}/messages", json={"content": "go"})
        if response.status_code != 503:
            return response
        if response.json().get("code") == "at_capacity":
            tally.refused += 1
        await asyncio.sleep(float(response.headers.get("retry-after", "1")))


@dataclass(frozen=True)
class LoadResult:
    # Concurrent replies, tokens per reply, and replies each client asks for in turn.
    turns: int
    tokens: int
    replies: int
    send_errors: int
    incomplete: int
    received: int
    events: int
    elapsed: float
    p50: float
    p95: float
    p99: float
    refused: int
    # CPU seconds per second of the load (1.0: one core busy) of each backend process (the
    # web process first), and of the two that share its machine: the provider, and the
    # clients (this process).
    process_cpu: tuple[float, ...]
    provider_cpu: float
    clients_cpu: float

    @property
    def cpu_share(self) -> float:
        return sum(self.process_cpu)

    @property
    def within_targets(self) -> bool:
        clean = self.send_errors == 0 and self.incomplete == 0 and self.received == self.expected
        return clean and self.p50 <= P50_TARGET_MS and self.p99 <= P99_TARGET_MS

    @property
    def expected(self) -> int:
        return self.turns * self.tokens * self.replies


async def _load(
    backends: Sequence[BackendProcess],
    provider: psutil.Process,
    turns: int,
    tokens: int,
    *,
    steady: bool = False,
) -> LoadResult:
    """`turns` clients, each with its own conversation. A burst (the default): all send at once,
    and every token counts. `steady`: client i of N starts i/N of a reply's length in and sends
    again as soon as its reply ends (2 replies each), so replies start and end all the time, as
    when N replies are always streaming; latency counts the tokens emitted while all N clients
    are in their replies (from one reply's length after the start to two). The clients talk
    to the first of `backends` (the web process); the CPU of each is measured."""
    client = await _client(backends[0].base_url)
    processes = (*(psutil.Process(backend.pid) for backend in backends), provider, psutil.Process())
    conversations = [
        (await client.post("/api/conversations", json={"title": f"load {n}"})).json()["id"]
        for n in range(turns)
    ]
    reply_seconds = tokens / PROVIDER_TOKENS_PER_SECOND
    replies = 2 if steady else 1
    now = time.time_ns()
    tally = Tally((now + int(reply_seconds * 1e9), now + int(2 * reply_seconds * 1e9)) if steady else None)
    failed_sends: list[httpx.Response] = []

    async def send_and_follow(index: int, cid: int) -> tuple[int, bool]:
        if steady:
            await asyncio.sleep(reply_seconds * index / turns)
        events, complete = 0, True
        for _ in range(replies):
            # Like a browser: its own stream opens as soon as its own send is accepted.
            response = await _send(client, cid, tally)
            if response.status_code != 202:
                failed_sends.append(response)
                return events, False
            delivered, in_order = await _follow(client, cid, tally)
            events, complete = events + delivered, complete and in_order
        return events, complete

    start, cpu_start = time.perf_counter(), [_cpu_seconds(process) for process in processes]
    results = await asyncio.gather(
        *(send_and_follow(index, cid) for index, cid in enumerate(conversations)), return_exceptions=True
    )
    elapsed = time.perf_counter() - start
    used = [_cpu_seconds(process) - before for process, before in zip(processes, cpu_start, strict=True)]
    *process_cpu, provider_cpu, clients_cpu = (seconds / elapsed for seconds in used)
    await client.aclose()
    if failed_sends:
        print("send failed:", failed_sends[0].status_code, failed_sends[0].text[:300])
    errors = len(failed_sends)
    failed = [r for r in results if isinstance(r, BaseException) or not r[1]]
    latencies = sorted(tally.latencies)
    quantile = statistics.quantiles(latencies, n=100) if len(latencies) > 100 else [float("nan")] * 99
    return LoadResult(
        turns=turns,
        tokens=tokens,
        replies=replies,
        send_errors=errors,
        incomplete=len(failed),
        received=tally.tokens,
        events=sum(r[0] for r in results if not isinstance(r, BaseException)),
        elapsed=elapsed,
        p50=quantile[49],
        p95=quantile[94],
        p99=quantile[98],
        refused=tally.refused,
        process_cpu=tuple(process_cpu),
        provider_cpu=provider_cpu,
        clients_cpu=clients_cpu,
    )


def _cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def _print_load(result: LoadResult) -> None:
    row(f"{result.turns} concurrent turns x {result.tokens} tokens", "value")
    row("  send errors / incomplete streams", f"{result.send_errors} / {result.incomplete}")
    row("  tokens received (expected)", f"{result.received} ({result.expected})")
    row("  events delivered per second", f"{result.events / result.elapsed:.0f}")
    row("  tokens delivered per second", f"{result.received / result.elapsed:.0f}")
    row(f"  added latency p50 ms (target <= {P50_TARGET_MS:.0f})", f"{result.p50:.2f}")
    row("  added latency p95 ms", f"{result.p95:.2f}")
    row(f"  added latency p99 ms (target <= {P99_TARGET_MS:.0f})", f"{result.p99:.2f}")
    row("  backend CPU share (1.0 = one core)", f"{result.cpu_share:.2f}")
    row("  beside it: provider / clients CPU share", f"{result.provider_cpu:.2f} / {result.clients_cpu:.2f}")
    row("  wall time s", f"{result.elapsed:.1f}")


async def _capacity(
    backends: Sequence[BackendProcess], provider: psutil.Process, tokens: int, levels: list[int]
) -> int:
    """The same load at rising concurrencies: the largest that meets both latency targets
    (returned). With a web process and a worker, the CPU of each and the replies one core of
    each carries at that level."""
    split = len(backends) > 1
    cpu = ("web CPU", "worker CPU", "per web core", "per wkr core") if split else ("backend CPU",)
    headings = ("p50 ms", "p99 ms", "tokens/s", *cpu, "CPU ms/token", "prov/clients", "targets")
    row("capacity: concurrent replies", *headings)
    best = 0
    cheapest = float("inf")
    for turns in levels:
        result = await _load(backends, provider, turns, tokens, steady=True)
        verdict = "met" if result.within_targets else "not met"
        rate = result.received / result.elapsed
        beside = f"{result.provider_cpu:.2f}/{result.clients_cpu:.2f}"
        per_token = 1000 * result.cpu_share / rate
        cheapest = min(cheapest, per_token)
        cells = [f"{result.p50:.2f}", f"{result.p99:.2f}", f"{rate:.0f}"]
        cells += [f"{share:.2f}" for share in result.process_cpu]
        if split:
            cells += [f"{turns / share:.0f}" for share in result.process_cpu]
        row(f"  {turns}", *cells, f"{per_token:.3f}", beside, verdict)
        if result.within_targets:
            best = max(best, turns)
    print(f"largest concurrency tried that meets both latency targets: {best or 'none'}")
    # The bound CPU sets whatever the latency: one core busy all the time at the cheapest level.
    ceiling = 1000 / cheapest / PROVIDER_TOKENS_PER_SECOND
    print(f"one core at {cheapest:.3f} CPU ms per token streams at most {ceiling:.0f} such replies")
    return best


async def _past_capacity(
    backends: Sequence[BackendProcess], provider: psutil.Process, tokens: int, capacity: int
) -> None:
    """Twice the capacity asks at once: the admitted replies keep the targets, the rest wait."""
    result = await _load(backends, provider, 2 * capacity, tokens, steady=True)
    row(f"past capacity: {2 * capacity} clients, capacity {capacity}", "value")
    row("  sends refused with 503 at_capacity (asked again)", result.refused)
    row("  send errors / incomplete streams", f"{result.send_errors} / {result.incomplete}")
    row(f"  admitted: added latency p50 ms (target <= {P50_TARGET_MS:.0f})", f"{result.p50:.2f}")
    row(f"  admitted: added latency p99 ms (target <= {P99_TARGET_MS:.0f})", f"{result.p99:.2f}")
    row("  web / worker CPU share", " / ".join(f"{share:.2f}" for share in result.process_cpu))
    kept = result.refused > 0 and result.within_targets
    row("  admitted replies within the targets, the rest refused", "yes" if kept else "NO")


async def _bare_stream_cpu(provider_url: str, tokens: int) -> float:
    """CPU milliseconds per token of a bare `ChatOpenAI.astream` in this process: the floor that
    LangChain and the OpenAI client put under any runtime, whatever it does with the tokens."""
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(model="scripted-model", base_url=f"{provider_url}/v1", api_key="x", stream_usage=True)
    async with httpx.AsyncClient() as provider:
        await provider.post(f"{provider_url}/_script", json=[{"clock_tokens": tokens, "token_delay": 0}] * 2)
    async for _ in model.astream("warm up"):
        pass
    start = time.process_time()
    async for _ in model.astream("go"):
        pass
    return (time.process_time() - start) * 1000 / tokens


async def _replay(base_url: str, provider_url: str, events_wanted: int) -> None:
    client = await _client(base_url)
    cid = (await client.post("/api/conversations", json={"title": "replay"})).json()["id"]
    # One token every 2 ms: each becomes its own event, so the live stream has >= events_wanted.
    script = [{"clock_tokens": events_wanted, "token_delay": 0.002}]
    async with httpx.AsyncClient() as provider:
        await provider.post(f"{provider_url}/_script", json=script)
    await client.post(f"/api/conversations/{cid}/messages", json={"content": "long"})
    live_start = time.perf_counter()
    live_events, ok = await _follow(client, cid, Tally())
    live = time.perf_counter() - live_start
    replay_start = time.perf_counter()
    replay_events, replay_ok = await _follow(client, cid, Tally())
    replay = time.perf_counter() - replay_start
    row("reconnect replay", "events", "seconds")
    row("  live stream", live_events, f"{live:.3f}")
    row("  full replay after reconnect", replay_events, f"{replay:.3f}")
    row("  replay / live (target <= 2x)", f"{replay / live:.3f}x", "ok" if ok and replay_ok else "INCOMPLETE")
    await client.aclose()


@contextmanager
def _backend(database: str, provider_url: str, work: Path) -> Iterator[BackendProcess]:
    """A migrated database and one backend process on it."""
    databases.migrate(database)
    backend = BackendProcess(backend_env(database, work / "data", f"{provider_url}/v1"), work / "backend.log")
    try:
        yield backend.start()
    finally:
        backend.stop()


@contextmanager
def _split(
    database: str, redis_url: str, provider_url: str, work: Path, **extra: str
) -> Iterator[list[BackendProcess]]:
    """A migrated PostgreSQL database, one web process that only relays and one worker."""
    work.mkdir(parents=True, exist_ok=True)
    databases.migrate(database)
    env = {
        **backend_env(database, work / "data", f"{provider_url}/v1"),
        "CHAT_SHELL_REDIS_URL": redis_url,
        "CHAT_SHELL_WORKER_IN_PROCESS": "false",
        **extra,
    }
    web = BackendProcess(env, work / "web.log")
    worker = WorkerProcess(env, work / "worker.log")
    try:
        yield [web.start(), worker.start()]
    finally:
        web.stop()
        worker.stop()


def _production_shape(
    postgres: str, provider_url: str, provider: psutil.Process, tokens: int, levels: list[int], work: Path
) -> None:
    print("== PostgreSQL and Redis: one web process, one worker ==")
    with private_redis_server(work) as redis:
        with _split(postgres, redis.url, provider_url, work / "split") as backends:
            best = asyncio.run(_capacity(backends, provider, tokens, levels))
        capacity = best or levels[0]
        limit = {"CHAT_SHELL_TURN_CAPACITY": str(capacity)}
        with _split(postgres, redis.url, provider_url, work / "capped", **limit) as backends:
            asyncio.run(_past_capacity(backends, provider, tokens, capacity))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--turns", type=int, default=None)
    parser.add_argument("--split-only", action="store_true", help="only the production shape's sweep")
    parser.add_argument("--levels", type=int, nargs="+", help="the concurrencies of every sweep")
    args = parser.parse_args()
    turns = args.turns or (20 if args.quick else 200)
    tokens = 100 if args.quick else 500
    levels = args.levels or (QUICK_CAPACITY_LEVELS if args.quick else CAPACITY_LEVELS)
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        provider_port = free_port()
        provider = _start_provider(provider_port, PROVIDER_TOKENS_PER_SECOND, tokens)
        provider_url = f"http://127.0.0.1:{provider_port}"
        provider_process = psutil.Process(provider.pid)
        try:
            if not args.split_only:
                with _backend(f"sqlite+aiosqlite:///{work / 'bench.db'}", provider_url, work) as backend:
                    floor = asyncio.run(_bare_stream_cpu(provider_url, 2000))
                    row("bare ChatOpenAI.astream CPU per token (ms)", f"{floor:.3f}")
                    row("  tokens/s one core can parse at most", f"{1000 / floor:.0f}")
                    row("  concurrent 50-token/s turns that fills", f"{1000 / floor / 50:.0f}")
                    print("== SQLite (the default database) ==")
                    _print_load(asyncio.run(_load([backend], provider_process, turns, tokens)))
                    asyncio.run(_capacity([backend], provider_process, tokens, levels))
                    asyncio.run(_replay(backend.base_url, provider_url, 1000 if args.quick else 5000))
            with databases.scratch_postgres() as postgres:
                if postgres is None:
                    print(f"PostgreSQL not reachable at {databases.POSTGRES_ADMIN_URL}: its sweep is skipped")
                    return
                if not args.split_only:
                    print("== PostgreSQL, one process (a worker inside `serve`) ==")
                    with _backend(postgres, provider_url, work) as backend:
                        if not args.quick:
                            _print_load(asyncio.run(_load([backend], provider_process, turns, tokens)))
                        asyncio.run(_capacity([backend], provider_process, tokens, levels))
                split_levels = args.levels or (QUICK_SPLIT_LEVELS if args.quick else SPLIT_LEVELS)
                _production_shape(postgres, provider_url, provider_process, tokens, split_levels, work)
        finally:
            provider.terminate()
            provider.wait()


if __name__ == "__main__":
    main()
