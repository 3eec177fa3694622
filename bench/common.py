"""Small shared helpers for benchmarks: timing and printing."""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


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
