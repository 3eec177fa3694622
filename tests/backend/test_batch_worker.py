"""The batch loop under the event log's group commit and the Redis outbox: every item queued
reaches `process`, in arrival order, and what arrives during a batch goes in the next one."""

from __future__ import annotations

import asyncio

from backend.services.delivery.batch_worker import BatchWorker


async def test_every_item_is_handled_once_in_order_and_a_burst_during_a_batch_waits_for_the_next() -> None:
    batches: list[list[int]] = []
    first_running = asyncio.Event()
    release_first = asyncio.Event()

    async def process(batch: list[int]) -> None:
        batches.append(batch)
        if len(batches) == 1:
            first_running.set()
            await release_first.wait()

    worker: BatchWorker[int] = BatchWorker("test-batches", process)
    worker.start()
    try:
        worker.add([1, 2, 3])
        await asyncio.wait_for(first_running.wait(), 5)
        worker.add([4, 5])
        worker.add([6])
        assert len(worker) == 3  # queued behind the running batch
        release_first.set()
        for _ in range(100):
            if sum(map(len, batches)) == 6:
                break
            await asyncio.sleep(0.01)
    finally:
        await worker.stop()
    assert batches == [[1, 2, 3], [4, 5, 6]]
