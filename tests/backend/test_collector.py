"""A served backend leaves full garbage collections (which stall every stream for as long as they
walk the heap) to the moments when no turn runs, and to a longest interval under a load that
never stops (`backend.collector`)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import Any

import pytest

from backend import collector


@pytest.fixture
def full_collections(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The loop times of the full collections that run, with the collector's thresholds put back."""
    monkeypatch.setattr(collector, "CHECK_SECONDS", 0.02)
    thresholds = gc.get_threshold()
    seen: list[float] = []

    def record(phase: str, info: dict[str, Any]) -> None:
        if phase == "stop" and info["generation"] == 2:
            seen.append(asyncio.get_running_loop().time())

    gc.callbacks.append(record)
    try:
        yield seen
    finally:
        gc.callbacks.remove(record)
        gc.set_threshold(*thresholds)


def _promote_a_third_of_the_heap() -> list[list[int]]:
    """Enough new long-lived objects that CPython's own rule (a quarter of the heap promoted
    since the last full collection) runs a full collection while they are made."""
    return [[n] for n in range(len(gc.get_objects()) // 3)]


async def test_no_full_collection_runs_while_a_turn_runs_and_one_runs_once_none_does(
    full_collections: list[float],
) -> None:
    collector.defer_full_collections()
    assert collector.full_collections_deferred()
    busy = True
    task = asyncio.create_task(collector.run_full_collections(lambda: busy))
    try:
        kept = _promote_a_third_of_the_heap()
        full_collections.clear()  # the test's own, above
        streamed = []
        for _ in range(20):  # young collections, as the chunks of a streaming reply make
            streamed.append([[n] for n in range(5000)])
            await asyncio.sleep(0.01)
        assert full_collections == []
        busy = False
        await asyncio.sleep(0.2)
        assert len(full_collections) == 1  # and an idle process with nothing new is not walked again
        del kept, streamed
    finally:
        task.cancel()


async def test_a_load_that_never_stops_still_gets_a_full_collection_in_time(
    full_collections: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(collector, "FULL_COLLECTION_MAX_SECONDS", 0.2)
    collector.defer_full_collections()
    started = asyncio.get_running_loop().time()
    task = asyncio.create_task(collector.run_full_collections(lambda: True))
    try:
        await asyncio.sleep(0.5)
    finally:
        task.cancel()
    assert full_collections
    assert full_collections[0] - started >= 0.2
