"""When the cyclic garbage collector walks the whole heap (issue 18).

A full collection stops the event loop for as long as it takes to walk every tracked object
the process holds. The startup heap is frozen (`freeze_startup_heap`), but a streaming
reply's chunks stay alive until it ends (LangChain keeps them to merge the final message):
about 15 objects per token. With 40 replies streaming, the heap reached 180,000 objects, and
CPython's own trigger (a quarter of the heap promoted since the last full collection) ran one
about every 2.5 s, each 50-150 ms long and freeing nothing, and every stream stalled behind it:
they were the p99 of `bench.bench_delivery`.

`serve` and `worker` therefore turn automatic full collections off; young collections are unchanged. The
app runs one itself when this process has no turn running (its heap is then small) and
something reached the old generation since the last one, and at the latest every
`FULL_COLLECTION_MAX_SECONDS`, so cyclic garbage is still freed under a load that never stops.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable

# The old generation's threshold that CPython never reaches: no automatic full collection.
_NEVER = 2**31 - 1
CHECK_SECONDS = 5.0
FULL_COLLECTION_MAX_SECONDS = 300.0


def freeze_startup_heap() -> None:
    """Moves every object alive now (imported modules, classes, compiled schemas: they live as
    long as the server) into the collector's permanent generation. Otherwise every full
    collection walks them all again: 150-290 ms pauses at about 400,000 objects on a 2-core
    machine, each one stalling every live stream (`bench.bench_delivery`)."""
    gc.collect()
    gc.freeze()


def defer_full_collections() -> None:
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, _NEVER)


def full_collections_deferred() -> bool:
    return gc.get_threshold()[2] == _NEVER


async def run_full_collections(busy: Callable[[], bool]) -> None:
    """The full collections of a process whose automatic ones are deferred, until cancelled."""
    loop = asyncio.get_running_loop()
    last = loop.time()
    while True:
        await asyncio.sleep(CHECK_SECONDS)
        # gc.get_count()[2]: young collections since the last full one (so something may have
        # been promoted); an idle process with nothing new is not walked again.
        due = loop.time() - last >= FULL_COLLECTION_MAX_SECONDS
        if due or (gc.get_count()[2] > 0 and not busy()):
            gc.collect()
            last = loop.time()
