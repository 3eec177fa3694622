"""What runs inside an extraction worker process: its resource limits and its tasks.

Each worker runs one task and exits (the pool forks a fresh one), so the limits set when it
starts apply to exactly that task, and nothing of one user's file stays in a process that reads
the next. The kernel enforces the limits even while a parser is deep inside C code.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from backend.services.attachments.extraction import (
    DetectedType,
    Extraction,
    ExtractionLimits,
    detect,
)
from backend.services.attachments.extraction.limits import MB

# The exit status of a worker that ran out of its address space (see `_bounded`).
OUT_OF_MEMORY_EXIT = 86
T = TypeVar("T")


def start_worker(limits: ExtractionLimits) -> None:
    """The pool's initializer, run in each new worker before it takes its task."""
    _soft_limit(resource.RLIMIT_AS, limits.memory_mb * MB)  # past it, allocations fail
    _soft_limit(resource.RLIMIT_CPU, limits.cpu_seconds)  # at it, SIGXCPU ends the process
    _soft_limit(resource.RLIMIT_CORE, 0)  # a killed worker leaves no core file with a user's data


def _soft_limit(which: int, value: int) -> None:
    _, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, hard))


def detect_type(original: Path, filename: str) -> DetectedType:
    return _bounded(lambda: detect(original, filename))


def extract_file(
    original: Path,
    filename: str,
    detected: DetectedType | None,
    workdir: Path,
    max_chars: int,
    limits: ExtractionLimits,
) -> Extraction:
    """The file's extraction; its type detected here unless the caller knows it already."""
    # Preloaded by the forkserver (sandbox.py), so a worker has it; the process that only
    # schedules tasks never imports the parsers.
    from backend.services.attachments.extraction.extract import extract

    return _bounded(
        lambda: extract(original, detected or detect(original, filename), workdir, max_chars, limits)
    )


def _bounded(task: Callable[[], T]) -> T:
    try:
        return task()
    except MemoryError:
        # Past RLIMIT_AS the heap may be in any state, and even sending a result could fail:
        # end the process; the pool reports this exit status and forks a fresh worker.
        os._exit(OUT_OF_MEMORY_EXIT)
