"""Small shared helpers for benchmarks: timing, printing and the databases to measure on."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path

from tests.support import databases


async def median_ms(fn: Callable[[], Awaitable[object]], repeat: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        await fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        await fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


@dataclass(frozen=True)
class Timings:
    wall: list[float]  # ms per call
    cpu: list[float]  # ms of CPU the process spent per call (all threads: the SQLite driver's too)

    @property
    def median(self) -> float:
        return statistics.median(self.wall)


async def timed(fn: Callable[[], Awaitable[object]], repeat: int, warmup: int = 2) -> Timings:
    for _ in range(warmup):
        await fn()
    wall, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        await fn()
        wall.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
    return Timings(wall, cpu)


def row(label: str, *cells: object, width: int = 44) -> None:
    print(f"{label:<{width}}" + "".join(f"{cell!s:>14}" for cell in cells), flush=True)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


async def each_database(
    measure: Callable[[str, str, Path], Awaitable[None]], only: str | None = None
) -> None:
    """`measure(url, label, scratch)` on a new migrated SQLite database, then on a new migrated
    PostgreSQL one when the server is reachable; `only` names one of the two labels."""
    with tempfile.TemporaryDirectory() as directory:
        scratch = Path(directory)
        if only in (None, "sqlite"):
            await measure(await databases.migrated_sqlite(scratch), "sqlite", scratch)
        if only in (None, "postgresql"):
            async with databases.migrated_postgres() as url:
                if url is None:
                    print("[postgresql] not reachable: skipped")
                else:
                    await measure(url, "postgresql", scratch)


def run_with_quick_flag(main_async: Callable[[bool], Coroutine[object, object, None]]) -> None:
    """The command line of a benchmark whose one option is `--quick`."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    asyncio.run(main_async(parser.parse_args().quick))
