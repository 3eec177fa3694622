"""Attachment extraction in worker processes, each task under a wall-clock, CPU-time and memory
limit.

pebble's ProcessPool runs the tasks: it stops a task that outlives its wall-clock limit by
killing its worker, reports a worker that died (at the kernel's CPU limit, or by the memory exit
of worker.py), and forks a replacement. A stopped task comes back `failed` with a reason a user
can read; the upload itself is kept. Workers are forked by multiprocessing's forkserver, a clean
single-threaded process that preloaded the parsers, never by this multi-threaded server.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import signal
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from dataclasses import fields
from pathlib import Path
from typing import TypeVar

from pebble import ProcessExpired, ProcessPool

from backend.services.attachments.extraction import (
    DetectedType,
    Extraction,
    ExtractionLimits,
    ExtractionStopped,
    failed,
    worker,
)
from backend.services.attachments.extraction.store import remove_extract
from backend.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")
# The type of a file whose detection itself a limit stopped.
UNDETECTED = DetectedType("application/octet-stream", "binary")

_FORKSERVER = multiprocessing.get_context("forkserver")
# Imported once by the forkserver when it starts (at the first pool's first worker), so a worker
# is forked ready to parse; the parsers (extract.py) by name, since this process never parses.
# multiprocessing still imports the main module in each new worker (for `chat-shell`, the small
# backend.cli), so main modules keep their top level light.
_FORKSERVER.set_forkserver_preload([worker.__name__, "backend.services.attachments.extraction.extract"])


class ExtractionSandbox:
    """The app's extraction workers: forked at the first extraction, killed by `stop`."""

    def __init__(self, limits: ExtractionLimits, workers: int) -> None:
        self.limits = limits
        self._workers = workers
        self._lock = threading.Lock()
        self._pool: ProcessPool | None = None
        self._stopped = False

    @classmethod
    def from_settings(cls, settings: Settings) -> ExtractionSandbox:
        # Each limit is the setting `extraction_<field>`.
        limits = ExtractionLimits(
            **{
                field.name: getattr(settings, f"extraction_{field.name}")
                for field in fields(ExtractionLimits)
            }
        )
        return cls(limits, settings.extraction_workers)

    async def detect(self, original: Path, filename: str) -> DetectedType:
        """The file's type; raises `ExtractionStopped` when even that overran a limit."""
        return await self._run(worker.detect_type, original, filename)

    async def extract(
        self,
        original: Path,
        filename: str,
        workdir: Path,
        max_chars: int,
        detected: DetectedType | None = None,
    ) -> Extraction:
        """The text of `original` stored in `workdir`, or `failed` with the reason a limit gave.

        One task detects the type (unless `detected` is given) and extracts; only when a limit
        stops it does a second task detect the type alone, for the upload's listing.
        """
        try:
            outcome = await self._run(
                worker.extract_file, original, filename, detected, workdir, max_chars, self.limits
            )
        except ExtractionStopped as stopped:
            await asyncio.to_thread(remove_extract, workdir)  # what the killed worker half wrote
            return failed(detected or await self._type_of(original, filename), max_chars, stopped)
        if "stopped_by" in outcome.notes:
            log.warning(
                "[Extraction] %s file refused by %s: %s",
                outcome.detected.kind,
                outcome.notes["stopped_by"],
                outcome.notes["error"],
            )
        return outcome

    async def _type_of(self, original: Path, filename: str) -> DetectedType:
        try:
            return await self.detect(original, filename)
        except ExtractionStopped:
            return UNDETECTED

    def stop(self) -> None:
        """Kill the workers. The app calls this once its requests are done (an extraction whose
        request is cancelled is cancelled with it, which kills its worker)."""
        with self._lock:
            self._stopped = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.stop()
            pool.join()

    async def _run(self, task: Callable[..., T], *args: object) -> T:
        try:
            return await self._attempt(task, args)
        except BrokenProcessPool:
            # pebble gives up a pool whose worker died while no task ran; `_submit` replaces
            # it, and the task gets one more try there.
            return await self._attempt(task, args)

    async def _attempt(self, task: Callable[..., T], args: tuple[object, ...]) -> T:
        future: Future[T] = await asyncio.to_thread(self._submit, task, args)
        exitcode = None
        try:
            return await asyncio.wrap_future(future)
        except TimeoutError:
            stopped = ExtractionStopped(
                f"extracting its text took longer than {self.limits.timeout_seconds:g} s",
                "timeout_seconds",
            )
        except ProcessExpired as exc:
            exitcode = exc.exitcode
            stopped = self._expired(exitcode)
        log.warning(
            "[Extraction] worker killed in %s by %s (exit status %s): %s",
            task.__name__,
            stopped.stopped_by,
            exitcode,
            stopped.reason,
        )
        raise stopped

    def _submit(self, task: Callable[..., T], args: tuple[object, ...]) -> Future[T]:
        with self._lock:
            if self._stopped:
                raise RuntimeError("the extraction sandbox is stopped")
            if self._pool is None or not self._pool.active:
                self._replace_pool()
            assert self._pool is not None
            return self._pool.schedule(task, args, timeout=self.limits.timeout_seconds)

    def _replace_pool(self) -> None:
        if self._pool is not None:
            self._pool.stop()
            self._pool.join()
        # One task per worker: the limits set when a worker starts cover exactly one task.
        self._pool = ProcessPool(
            max_workers=self._workers,
            max_tasks=1,
            initializer=worker.start_worker,
            initargs=(self.limits,),
            context=_FORKSERVER,
        )

    def _expired(self, exitcode: int | None) -> ExtractionStopped:
        if exitcode == -signal.SIGXCPU:
            return ExtractionStopped(
                f"extracting its text used more than {self.limits.cpu_seconds} s of processor time",
                "cpu_seconds",
            )
        if exitcode == worker.OUT_OF_MEMORY_EXIT:
            return ExtractionStopped(
                f"extracting its text needed more than {self.limits.memory_mb} MB of memory", "memory_mb"
            )
        return ExtractionStopped("the text extractor stopped unexpectedly", "worker_exit")
