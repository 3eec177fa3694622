"""The extraction sandbox's worker processes as a test sees them: which they are, and the peak
memory each one reached."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import TracebackType

import psutil

FORKSERVER_MARK = "multiprocessing.forkserver"


def forkserver() -> psutil.Process | None:
    """multiprocessing's forkserver of this process (it forks every extraction worker)."""
    for child in psutil.Process().children():
        try:
            if any(FORKSERVER_MARK in part for part in child.cmdline()):
                return child
        except psutil.NoSuchProcess:
            continue
    return None


def extraction_workers() -> list[psutil.Process]:
    """The extraction workers alive now (the forkserver's children)."""
    server = forkserver()
    if server is None:
        return []
    try:
        return [worker for worker in server.children() if worker.status() != psutil.STATUS_ZOMBIE]
    except psutil.NoSuchProcess:
        return []


def peak_rss_bytes(pid: int) -> int | None:
    """The process's peak resident set size so far (VmHWM), or None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


class PeakMemory:
    """Samples every extraction worker's peak RSS while the block runs (every 10 ms, in a
    thread): `peak_bytes` is the highest any worker reached, `workers` how many were seen."""

    def __init__(self, interval: float = 0.01) -> None:
        self._interval = interval
        self._peaks: dict[int, int] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="peak-memory", daemon=True)

    @property
    def peak_bytes(self) -> int:
        return max(self._peaks.values(), default=0)

    @property
    def workers(self) -> int:
        return len(self._peaks)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._done.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._done.is_set():
            for worker in extraction_workers():
                peak = peak_rss_bytes(worker.pid)
                if peak is not None:
                    self._peaks[worker.pid] = max(peak, self._peaks.get(worker.pid, 0))
            time.sleep(self._interval)
