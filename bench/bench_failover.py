"""Failover timings of the production shape (issue 33).

    python -m bench.bench_failover [--quick]

Two web processes and two workers on PostgreSQL and a Redis of their own, with the default
settings; the scripted provider streams each reply at 50 tokens/s. For each kind of stop, a
reply is streaming when one process is stopped, and the client does what the page does: on a
broken connection or a reconnect hint it opens the stream on the other web process from its
last event. Printed per case:

- web kill -9 and web SIGTERM: the gap in the stream, from the last event before the stop to
  the first after it (the client reconnects at once; the page waits `retry` ms of the hint);
- worker kill -9: the time from the kill to the `turn.restarted` event and to the restarted
  reply's first text (the queue notices the lost worker after `worker_restart_after_seconds`);
- worker SIGTERM: the longest pause between two events while it drains (the reply finishes
  on it), and, with a drain timeout of 1 s, the time from SIGTERM to the reply restarted on
  the other worker.

Every case also checks what the user gets: one event sequence with no gap and no duplicate,
and a stored reply equal to what the page shows.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from backend.services.delivery.streams import RECONNECT
from bench.bench_delivery import _client, _start_provider
from bench.common import row
from tests.support import databases
from tests.support.processes import BackendProcess, WorkerProcess, backend_env
from tests.support.servers import free_port, private_redis_server
from tests.support.sse import Received, StreamRead, read_stream

TOKENS_PER_SECOND = 50
# Each stop lands once this many events of the reply arrived (about 2 s of it).
MID_REPLY_EVENTS = 100


@dataclass
class Timed:
    """The events of one reply across every stream it was read on, with when each arrived."""

    events: list[Received] = field(default_factory=list)
    arrived: list[float] = field(default_factory=list)
    _arrival: asyncio.Event = field(default_factory=asyncio.Event)

    def stamp(self, stop: Callable[[Received], bool]) -> Callable[[list[Received]], bool]:
        def until(events: list[Received]) -> bool:
            self.events.append(events[-1])
            self.arrived.append(time.perf_counter())
            self._arrival.set()
            return stop(events[-1])

        return until

    async def received(self, count: int) -> None:
        """Until `count` events arrived: the reply is well under way."""
        while len(self.events) < count:
            self._arrival.clear()
            await self._arrival.wait()

    def first_after(self, moment: float, event: str | None = None) -> float:
        """When the first event after `moment` arrived: of that type, else of the reply (a
        reconnect hint is not part of it)."""
        return next(
            t
            for t, e in zip(self.arrived, self.events, strict=True)
            if t > moment and (e.event == event if event else e.event != RECONNECT)
        )

    def last_before(self, moment: float) -> float:
        return max(t for t in self.arrived if t <= moment)

    def longest_pause(self, after: float) -> float:
        times = [t for t in self.arrived if t >= after]
        return max(b - a for a, b in itertools.pairwise(times))

    def exact(self) -> bool:
        """One sequence: every event once, in order (a reconnect hint is not part of it)."""
        seqs = [e.seq for e in self.events if e.event != RECONNECT]
        return seqs == list(range(1, len(seqs) + 1))

    @property
    def shown(self) -> str:
        return StreamRead(200, self.events).shown


class Fleet:
    """Two web processes and two workers; a stopped one is replaced after its case."""

    def __init__(self, env: dict[str, str], work: Path) -> None:
        self._env = env
        self._work = work
        self._started = 0
        self.webs = [self._web(n) for n in range(2)]
        self.workers = [self._worker({}) for _ in range(2)]

    def _web(self, n: int) -> BackendProcess:
        return BackendProcess(self._env, self._work / f"web{n}.log").start()

    def _worker(self, extra: dict[str, str]) -> tuple[BackendProcess, Path]:
        self._started += 1
        log = self._work / f"worker{self._started}.log"
        return WorkerProcess({**self._env, **extra}, log).start(), log

    def replace_web(self, n: int) -> None:
        self.webs[n].stop()
        self.webs[n] = self._web(n)

    def replace_workers(self, **extra: str) -> None:
        """Stops what is left of the workers and starts two new ones with `extra` settings."""
        for worker, _ in self.workers:
            worker.stop()
        self.workers = [self._worker(extra) for _ in range(2)]

    def running(self, turn_id: int) -> BackendProcess:
        """The worker that took the turn (each logs the jobs it starts)."""
        taken = f"turn_id={turn_id})"
        for worker, log in self.workers:
            if any(
                "Starting job run_turn" in line and taken in line for line in log.read_text().splitlines()
            ):
                return worker
        raise AssertionError(f"no worker took turn {turn_id}")

    def stop(self) -> None:
        for process in [*self.webs, *(worker for worker, _ in self.workers)]:
            process.stop()


async def _reply(client: httpx.AsyncClient) -> int:
    cid = (await client.post("/api/conversations", json={"title": "failover"})).json()["id"]
    sent = await client.post(f"/api/conversations/{cid}/messages", json={"content": "go"})
    assert sent.status_code == 202, sent.text
    return cid


async def _stored(client: httpx.AsyncClient, cid: int) -> str:
    for _ in range(600):
        messages = (await client.get(f"/api/conversations/{cid}/messages")).json()["items"]
        if messages[-1]["status"] not in ("pending", "streaming"):
            assert messages[-1]["status"] == "completed", messages[-1]
            return messages[-1]["result"]["value"]
        await asyncio.sleep(0.1)
    raise AssertionError("the reply never ended")


def _never(_: Received) -> bool:
    return False


async def _read_until_broken(
    client: httpx.AsyncClient, cid: int, timed: Timed, stop: Callable[[Received], bool]
) -> None:
    """Reads on one web process until `stop` says so, the stream ends or its process goes."""
    with contextlib.suppress(httpx.TransportError):
        await read_stream(client, cid, until=timed.stamp(stop))


async def _resume(client: httpx.AsyncClient, cid: int, timed: Timed) -> None:
    last = next(e.id for e in reversed(timed.events) if e.event != RECONNECT)
    await read_stream(client, cid, last_event_id=last, until=timed.stamp(_never))


def _on(client: httpx.AsyncClient, web: BackendProcess) -> httpx.AsyncClient:
    other = httpx.AsyncClient(base_url=web.base_url, timeout=120, cookies=client.cookies)
    other.headers.update(client.headers)
    return other


async def _web_stop(fleet: Fleet, client: httpx.AsyncClient, kill: bool) -> tuple[float, str]:
    """A web process stopped mid-reply: (the gap in the stream, exact and stored as shown)."""
    cid = await _reply(client)
    timed = Timed()
    reading = asyncio.create_task(_read_until_broken(client, cid, timed, lambda e: e.event == RECONNECT))
    await timed.received(MID_REPLY_EVENTS)
    stopped = time.perf_counter()
    if kill:
        await asyncio.to_thread(fleet.webs[0].kill)
    else:
        fleet.webs[0].terminate()
    await reading
    other = _on(client, fleet.webs[1])
    try:
        await _resume(other, cid, timed)
        stored = await _stored(other, cid)
    finally:
        await other.aclose()
    gap = timed.first_after(stopped) - timed.last_before(stopped)
    return gap, _exact(timed, stored)


async def _worker_stop(fleet: Fleet, client: httpx.AsyncClient, kill: bool) -> tuple[Timed, float, str]:
    """A reply whose worker is killed or sent SIGTERM mid-reply: (its events, when the worker
    was stopped, the stored reply). Both workers are replaced afterwards."""
    cid = await _reply(client)
    timed = Timed()
    reading = asyncio.create_task(read_stream(client, cid, until=timed.stamp(_never)))
    await timed.received(MID_REPLY_EVENTS)
    running = fleet.running(int(timed.events[0].id.split(":")[0]))
    stopped = time.perf_counter()
    if kill:
        await asyncio.to_thread(running.kill)
    else:
        running.terminate()
    await reading
    stored = await _stored(client, cid)
    await asyncio.to_thread(running.wait, 180)
    return timed, stopped, stored


def _restart_times(timed: Timed, stopped: float) -> tuple[float, float]:
    """Seconds from the stop to the `turn.restarted` event and to the new reply's first text."""
    restarted = timed.first_after(stopped, "turn.restarted")
    return restarted - stopped, timed.first_after(restarted, "message.delta") - stopped


def _exact(timed: Timed, stored: str) -> str:
    """What the user got: every event once and in order, and the stored reply as shown."""
    if not timed.exact():
        return "GAP OR DUP"
    return "exact" if timed.shown == stored else "TEXT DIFFERS"


async def _cases(env: dict[str, str], work: Path) -> None:
    fleet = Fleet(env, work)
    client = await _client(fleet.webs[0].base_url)
    try:
        row("failover case (one reply at 50 tokens/s)", "seconds", "stream")
        for kill, name in ((True, "kill -9"), (False, "SIGTERM")):
            gap, exact = await _web_stop(fleet, client, kill)
            row(f"  web {name}: gap in the stream", f"{gap:.3f}", exact)
            fleet.replace_web(0)
            await client.aclose()
            client = await _client(fleet.webs[0].base_url)
        timed, stopped, stored = await _worker_stop(fleet, client, kill=True)
        to_event, to_text = _restart_times(timed, stopped)
        row("  worker kill -9: to turn.restarted", f"{to_event:.2f}", _exact(timed, stored))
        row("  worker kill -9: to the restarted reply's text", f"{to_text:.2f}")
        fleet.replace_workers()
        timed, stopped, stored = await _worker_stop(fleet, client, kill=False)
        no_restart = not any(e.event == "turn.restarted" for e in timed.events)
        drained = "drained" if no_restart else "RESTARTED"
        row("  worker SIGTERM: longest pause while it drains", f"{timed.longest_pause(stopped):.3f}", drained)
        row("    (its reply finished on it)", "", _exact(timed, stored))
        fleet.replace_workers(CHAT_SHELL_WORKER_DRAIN_SECONDS="1")
        timed, stopped, stored = await _worker_stop(fleet, client, kill=False)
        to_event, to_text = _restart_times(timed, stopped)
        row("  worker SIGTERM, drain 1 s: to turn.restarted", f"{to_event:.2f}", _exact(timed, stored))
        row("  worker SIGTERM, drain 1 s: to the reply's text", f"{to_text:.2f}")
    finally:
        await client.aclose()
        fleet.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="the same cases (they are short)")
    parser.parse_args()
    with tempfile.TemporaryDirectory() as directory, databases.scratch_postgres() as postgres:
        if postgres is None:
            print(f"PostgreSQL not reachable at {databases.POSTGRES_ADMIN_URL}: skipped")
            return
        work = Path(directory)
        databases.migrate(postgres)
        # A reply of 20 s, long enough for every stop to land in the middle of it.
        provider_port = free_port()
        provider = _start_provider(provider_port, TOKENS_PER_SECOND, 20 * TOKENS_PER_SECOND)
        provider_url = f"http://127.0.0.1:{provider_port}"
        try:
            with private_redis_server(work) as redis:
                env = {
                    **backend_env(postgres, work / "data", f"{provider_url}/v1"),
                    "CHAT_SHELL_REDIS_URL": redis.url,
                    "CHAT_SHELL_WORKER_IN_PROCESS": "false",
                }
                asyncio.run(_cases(env, work))
        finally:
            provider.terminate()
            provider.wait()


if __name__ == "__main__":
    main()
