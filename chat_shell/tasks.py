"""A helper task that lives exactly as long as a `with` block (the turn's cancel watch, the
summary compaction's watchdog): started on entry, cancelled on exit however the block ends."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def running(work: Coroutine[Any, Any, None]) -> Iterator[None]:
    """Run `work` as a task for the extent of the block."""
    task = asyncio.create_task(work)
    try:
        yield
    finally:
        task.cancel()
