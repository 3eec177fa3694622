"""Small shared helpers for benchmarks: timing and printing."""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable


async def median_ms(fn: Callable[[], Awaitable[object]], repeat: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        await fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        await fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def row(label: str, *cells: object, width: int = 44) -> None:
    print(f"{label:<{width}}" + "".join(f"{cell!s:>14}" for cell in cells), flush=True)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"
