"""Instructions per delivered token, end to end, against a bare `ChatOpenAI.astream` (issues 18, 33).

    python -m bench.bench_token_cost [--quick] [--profile]

One turn of 500 tokens: the scripted provider (its own process) streams them to the backend
(`chat-shell serve`, SQLite, chat_shell in package mode), whose turn runs the graph and the
guard and writes the event log, publishes to the broker and streams SSE to a client in this
process. The backend runs under valgrind's callgrind with instrumentation off; it is switched
on (`callgrind_control`) only around the measured turn, after a warm-up turn, so start-up and
first-use work are not counted. The floor is a process that runs a bare `ChatOpenAI.astream`
of the same stream from the same provider, counted the same way. Instructions are the same
for the same work whatever else the machine does, so one run gives the ratio.

The provider sends each token only once the last one arrived (the SSE client, or the floor's
child, asks for the next: `stepped` replies), so however slowly valgrind runs, every token is
its own frame: one event each through the log, the broker and the stream, as at 50 tokens/s
(faster providers get 20 ms frames of several tokens, cheaper per token). The floor's child
prints a line per chunk to be stepped, a few thousand instructions of its count.

Then the production shape (issue 33), on PostgreSQL and Redis: a web process (`chat-shell
serve`) that only relays and a worker (`chat-shell worker`) that runs the turn, both under
callgrind and both counted around the same measured turn.

A process also works on a clock, whatever its turns do: the worker beats its heartbeat into
the queue and looks for stalled jobs every 2 s. Under valgrind the measured turn lasts minutes,
so its count holds far more of that than a turn at full speed does. So each process is also
counted idle for IDLE_SECONDS after the turn, and the per-token figures are net of that rate
over the turn's duration; the raw ratios and the idle rate (instructions per second, shared
by every turn the process runs) are printed beside them.

Targets: the embedded process at most 2.0x; in the split, the web process at most 0.35x and
web and worker together at most 1.6x. `--profile` also prints where the measured turn's work goes: the
costliest C functions by their own instructions (callgrind_annotate; mostly the interpreter),
and the Python-level split of the same turn in a backend at full speed under cProfile
(`bench.profiled_serve`), by package and by function.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pstats
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
from httpx_sse import aconnect_sse

from bench.bench_delivery import _client, _start_provider
from bench.common import row, verdict
from tests.support import databases
from tests.support.processes import BackendProcess, WorkerProcess, backend_env
from tests.support.servers import free_port, private_redis_server

ROOT = Path(__file__).resolve().parent.parent
TARGET_RATIO = 2.0
# The production shape: the relay parses nothing, and the two processes together cost less
# than the one that did everything.
WEB_TARGET_RATIO = 0.35
SPLIT_TARGET_RATIO = 1.6
# Callgrind with instrumentation off until the measured turn; one hash seed for every run
# keeps dict and set layouts (and so the counts) the same from run to run.
CALLGRIND = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
ENV = {"PYTHONHASHSEED": "0"}
# How long each process is counted idle after the measured turn.
IDLE_SECONDS = 20.0


def _control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, stdout=subprocess.DEVNULL)


def _measure_on(pid: int) -> None:
    _control(pid, "--instr=on")
    _control(pid, "--zero")


def _measure_off(pid: int, out_prefix: Path) -> Path:
    """Dumps what was counted since `_measure_on`; returns the dump file."""
    before = set(out_prefix.parent.glob(f"{out_prefix.name}.{pid}.*"))
    _control(pid, "--dump")
    _control(pid, "--instr=off")
    for _ in range(600):
        dumps = set(out_prefix.parent.glob(f"{out_prefix.name}.{pid}.*")) - before
        if dumps:
            return dumps.pop()
        time.sleep(0.1)
    raise RuntimeError("callgrind wrote no dump")


@dataclass(frozen=True)
class Counted:
    """One process's count over the measured turn, and its idle rate afterwards."""

    turn: int
    seconds: float
    idle_per_second: float

    @property
    def net(self) -> float:
        return max(0.0, self.turn - self.idle_per_second * self.seconds)


def _idle_rate(pid: int, out_prefix: Path) -> float:
    """Instructions per second of the process doing no turn (its clocks only)."""
    _measure_on(pid)
    time.sleep(IDLE_SECONDS)
    return _instructions(_measure_off(pid, out_prefix)) / IDLE_SECONDS


def _instructions(dump: Path) -> int:
    for _ in range(100):
        found = re.search(r"^(?:summary|totals):\s+(\d+)", dump.read_text(), re.MULTILINE)
        if found:
            return int(found.group(1))
        time.sleep(0.1)  # the dump is still being written
    raise RuntimeError(f"no instruction total in {dump}")


async def _script(provider_url: str, tokens: int, *, stepped: bool = False, delay: float = 0) -> None:
    reply = {"clock_tokens": tokens, "stepped": stepped, "token_delay": delay}
    async with httpx.AsyncClient() as provider:
        await provider.post(f"{provider_url}/_script", json=[reply])


async def _follow_stepped(
    client: httpx.AsyncClient, provider: httpx.AsyncClient, cid: int, tokens: int
) -> tuple[int, int, bool]:
    """Reads the stream, asking the provider for the next token as each one arrives:
    (tokens, events, complete and in order)."""
    received, seqs, terminal = 0, [], None
    async with aconnect_sse(client, "GET", f"/api/conversations/{cid}/stream") as source:
        async for sse in source.aiter_sse():
            if not sse.data:
                continue
            seqs.append(int(sse.id.split(":")[1]))
            if sse.event == "message.delta":
                received += len(json.loads(sse.data)["text"].split())
                if received < tokens:
                    await provider.post("/_step")
            if sse.event.startswith("turn.") and sse.event != "turn.started":
                terminal = sse.event
                break
    return received, len(seqs), terminal == "turn.completed" and seqs == list(range(1, len(seqs) + 1))


async def _turn(
    backend: BackendProcess, provider_url: str, tokens: int, measure: Callable[[], None], delay: float | None
) -> tuple[int, int]:
    """A warm-up turn, then `measure()` and the measured turn: (tokens, events) it delivered.
    The measured turn is stepped, or paced at `delay` seconds a token when one is given."""
    client = await _client(backend.base_url)
    provider = httpx.AsyncClient(base_url=provider_url)
    cid = (await client.post("/api/conversations", json={"title": "cost"})).json()["id"]
    await _script(provider_url, 20)
    await client.post(f"/api/conversations/{cid}/messages", json={"content": "warm up"})
    assert (await _follow_stepped(client, provider, cid, 0))[2], "the warm-up stream was incomplete"
    await _script(provider_url, tokens, stepped=delay is None, delay=delay or 0)
    measure()
    response = await client.post(f"/api/conversations/{cid}/messages", json={"content": "go"})
    assert response.status_code == 202, response.text
    delivered, events, complete = await _follow_stepped(client, provider, cid, tokens if delay is None else 0)
    assert complete, "the stream was incomplete"
    await client.aclose()
    await provider.aclose()
    return delivered, events


def _backend(work: Path, provider_url: str, launcher: list[str]) -> BackendProcess:
    database = f"sqlite+aiosqlite:///{work / 'bench.db'}"
    databases.migrate(database)
    env = {**backend_env(database, work / "data", f"{provider_url}/v1"), **ENV}
    return BackendProcess(env, work / "backend.log", launcher=launcher).start(timeout=600)


def _counted(provider_url: str, tokens: int, work: Path) -> tuple[Counted, int, int, Path]:
    """(the count, tokens delivered, events delivered, callgrind dump) of the measured turn."""
    out_prefix = work / "callgrind"
    backend = _backend(work, provider_url, [*CALLGRIND, f"--callgrind-out-file={out_prefix}.%p"])
    began: list[float] = []

    def measure() -> None:
        _measure_on(backend.pid)
        began.append(time.monotonic())

    try:
        delivered, events = asyncio.run(_turn(backend, provider_url, tokens, measure, None))
        seconds = time.monotonic() - began[0]
        dump = _measure_off(backend.pid, out_prefix)
        idle = _idle_rate(backend.pid, out_prefix)
    finally:
        backend.stop()
    return Counted(_instructions(dump), seconds, idle), delivered, events, dump


def _counted_split(provider_url: str, tokens: int, work: Path, postgres: str) -> tuple[Counted, Counted, int]:
    """(web count, worker count, tokens delivered) of the measured turn, with a web process
    that relays and a worker that runs it, on PostgreSQL and a Redis of its own."""
    databases.migrate(postgres)
    with private_redis_server(work) as redis:
        env = {
            **backend_env(postgres, work / "split-data", f"{provider_url}/v1"),
            "CHAT_SHELL_REDIS_URL": redis.url,
            "CHAT_SHELL_WORKER_IN_PROCESS": "false",
            **ENV,
        }
        web_prefix, worker_prefix = work / "callgrind-web", work / "callgrind-worker"
        web = BackendProcess(
            env, work / "web.log", launcher=[*CALLGRIND, f"--callgrind-out-file={web_prefix}.%p"]
        )
        worker = WorkerProcess(
            env, work / "worker.log", launcher=[*CALLGRIND, f"--callgrind-out-file={worker_prefix}.%p"]
        )
        began: list[float] = []

        def measure() -> None:
            _measure_on(web.pid)
            _measure_on(worker.pid)
            began.append(time.monotonic())

        try:
            web.start(timeout=600)
            worker.start(timeout=600)
            delivered, _ = asyncio.run(_turn(web, provider_url, tokens, measure, None))
            seconds = time.monotonic() - began[0]
            web_turn = _instructions(_measure_off(web.pid, web_prefix))
            worker_turn = _instructions(_measure_off(worker.pid, worker_prefix))
            web_idle, worker_idle = _idle_rate(web.pid, web_prefix), _idle_rate(worker.pid, worker_prefix)
        finally:
            web.stop()
            worker.stop()
    return Counted(web_turn, seconds, web_idle), Counted(worker_turn, seconds, worker_idle), delivered


def _profiled(provider_url: str, tokens: int, work: Path) -> pstats.Stats:
    """cProfile of the same turn in a backend at full speed (a token every 20 ms, 50 tokens/s)."""
    out = work / "turn.prof"
    backend = _backend(
        work / "profiled", provider_url, [sys.executable, "-m", "bench.profiled_serve", str(out), "--"]
    )
    try:
        asyncio.run(_turn(backend, provider_url, tokens, lambda: os.kill(backend.pid, signal.SIGUSR1), 0.02))
        os.kill(backend.pid, signal.SIGUSR2)
        for _ in range(100):
            if out.exists():
                break
            time.sleep(0.1)
        time.sleep(0.5)  # written in one go, but let it finish
    finally:
        backend.stop()
    return pstats.Stats(str(out))


def _print_profile(stats: pstats.Stats, count: int) -> None:
    """Own CPU time by package (the backend's and chat_shell's modules by subpackage), then the
    costliest functions by their own time."""
    by_package: Counter[str] = Counter()
    own = []
    for (file, line, name), (_, calls, own_time, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        by_package[_package(file, name)] += own_time
        own.append((own_time, calls, f"{_package(file, name)}: {Path(file).name}:{line} {name}"))
    total = sum(by_package.values())
    print(f"  own CPU time by package (cProfile, {total:.2f} s in all, the profiler's overhead included):")
    for package, seconds in by_package.most_common(count):
        print(f"    {100 * seconds / total:5.1f}%  {package}")
    print("  costliest functions by own time:")
    for own_time, calls, where in sorted(own, reverse=True)[:count]:
        print(f"    {100 * own_time / total:5.1f}%  {calls:>7} calls  {where[:110]}")


def _package(file: str, name: str) -> str:
    if file == "~":
        return "builtins"
    path = Path(file)
    if "site-packages" in path.parts:
        return path.parts[path.parts.index("site-packages") + 1].removesuffix(".py")
    if path.is_relative_to(ROOT):
        return "/".join(path.relative_to(ROOT).parts[:2]).removesuffix(".py")
    return f"stdlib {path.stem}"


def _bare_child(provider_url: str) -> None:
    """The floor, run under callgrind: a warm-up stream, then the measured one when told."""
    from langchain_openai import ChatOpenAI

    # The runtime's client settings (`create_chat_model`): usage streamed, no per-chunk timeout.
    model = ChatOpenAI(
        model="scripted-model",
        base_url=f"{provider_url}/v1",
        api_key="x",
        stream_usage=True,
        stream_chunk_timeout=None,
    )

    async def run() -> None:
        await consume()
        print("ready", flush=True)
        sys.stdin.readline()  # blocking: nothing else runs in this process meanwhile
        print(f"done {await consume(stepped=True)}", flush=True)
        sys.stdin.readline()

    async def consume(stepped: bool = False) -> int:
        chunks = 0
        async for chunk in model.astream("go"):
            chunks += 1
            if stepped and chunk.content:
                print("chunk", flush=True)  # the parent asks the provider for the next token
        return chunks

    asyncio.run(run())


def _bare(provider_url: str, tokens: int, out_prefix: Path) -> tuple[int, Path]:
    asyncio.run(_script(provider_url, 20))
    child = subprocess.Popen(
        [
            *CALLGRIND,
            f"--callgrind-out-file={out_prefix}.%p",
            sys.executable,
            "-m",
            "bench.bench_token_cost",
            "--bare-child",
            provider_url,
        ],
        cwd=ROOT,
        env={**_env(), **ENV},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=(out_prefix.parent / "bare.log").open("w"),
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "ready"
        asyncio.run(_script(provider_url, tokens, stepped=True))
        _measure_on(child.pid)
        child.stdin.write("go\n")
        child.stdin.flush()
        for _ in range(tokens - 1):
            assert child.stdout.readline().strip() == "chunk"
            httpx.post(f"{provider_url}/_step")
        while (done := child.stdout.readline().split()) == ["chunk"]:
            pass
        assert done and done[0] == "done", (out_prefix.parent / "bare.log").read_text()[-3000:]
        dump = _measure_off(child.pid, out_prefix)
        child.stdin.write("exit\n")
        child.stdin.flush()
        child.wait(120)
    finally:
        if child.poll() is None:
            child.kill()
    return _instructions(dump), dump


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _top(dump: Path, count: int) -> None:
    """The measured turn's costliest functions by their own instructions (the interpreter's
    C functions, the drivers, the parsers); the Python-level split needs cProfile."""
    annotate = subprocess.run(["callgrind_annotate", str(dump)], capture_output=True, text=True, check=True)
    lines = [line for line in annotate.stdout.splitlines() if re.match(r"^\s*[\d,]+ \(", line)]
    for line in lines[:count]:
        print("   ", line.strip()[:150])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--tokens", type=int, default=None)
    parser.add_argument("--bare-child", metavar="PROVIDER_URL")
    args = parser.parse_args()
    if args.bare_child:
        _bare_child(args.bare_child)
        return
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: the instruction count is skipped")
        return
    tokens = args.tokens or (100 if args.quick else 500)
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        provider_port = free_port()
        provider = _start_provider(provider_port, 0, 0)
        provider_url = f"http://127.0.0.1:{provider_port}"
        try:
            bare, bare_dump = _bare(provider_url, tokens, work / "callgrind")
            counted, delivered, events, dump = _counted(provider_url, tokens, work)
            with databases.scratch_postgres() as postgres:
                split = _counted_split(provider_url, tokens, work, postgres) if postgres else None
            stats = _profiled(provider_url, tokens, work) if args.profile else None
        finally:
            provider.terminate()
            provider.wait()
        assert delivered == tokens, f"{delivered} of {tokens} tokens delivered"
        cells = ("per token", "x floor", "raw x floor", "idle instr/s")
        row(f"one turn of {tokens} tokens, each on its own", *cells, width=52)
        row("  bare ChatOpenAI.astream (the floor)", f"{bare / tokens:,.0f}", "1.00x", width=52)

        def counted_row(label: str, count: Counted, target: float | None) -> None:
            ratio = count.net / bare
            judged = f"{ratio:.2f}x" + ("" if target is None else f" {verdict(ratio <= target)}")
            raw = f"{count.turn / bare:.2f}x"
            row(
                f"  {label}",
                f"{count.net / tokens:,.0f}",
                judged,
                raw,
                f"{count.idle_per_second:,.0f}",
                width=52,
            )

        counted_row(f"embedded: turn to SSE ({events} events, <= {TARGET_RATIO:.1f}x)", counted, TARGET_RATIO)
        if split is None:
            print(f"PostgreSQL not reachable at {databases.POSTGRES_ADMIN_URL}: the split is skipped")
        else:
            web, worker, split_delivered = split
            assert split_delivered == tokens, f"split: {split_delivered} of {tokens} tokens delivered"
            print("production shape: a web process relays, a worker runs the turn")
            counted_row(f"web process (<= {WEB_TARGET_RATIO:.2f}x)", web, WEB_TARGET_RATIO)
            counted_row("worker process", worker, None)
            both = Counted(web.turn + worker.turn, web.seconds, web.idle_per_second + worker.idle_per_second)
            counted_row(f"both (<= {SPLIT_TARGET_RATIO:.1f}x)", both, SPLIT_TARGET_RATIO)
        if stats is not None:
            print("backend, the measured turn, by own instructions (callgrind):")
            _top(dump, 12)
            print("bare astream, by own instructions (callgrind):")
            _top(bare_dump, 6)
            print("backend, the same turn at 50 tokens/s (cProfile):")
            _print_profile(stats, 25)
            kept = ROOT / ".cache" / "bench"
            kept.mkdir(parents=True, exist_ok=True)
            shutil.copy(dump, kept / "token_cost.callgrind")
            print(f"callgrind file kept at {(kept / 'token_cost.callgrind').relative_to(ROOT)}")


if __name__ == "__main__":
    main()
