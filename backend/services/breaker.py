"""A circuit breaker for a dependency that may hang or fail (Redis): callers skip it while it
is open instead of paying its timeout on every call."""

from __future__ import annotations

import time


class Breaker:
    """Stops calls to a failing dependency: after `threshold` failures in a row it opens for
    `cooldown` seconds, then lets one call through (a success closes it, a failure reopens it)."""

    def __init__(self, threshold: int = 3, cooldown: float = 5.0) -> None:
        self.threshold = threshold
        self.cooldown = cooldown
        self._failures = 0
        self._opened_at: float | None = None

    @property
    def closed(self) -> bool:
        return self._opened_at is None

    def allows(self) -> bool:
        return self._opened_at is None or time.monotonic() - self._opened_at >= self.cooldown

    def succeeded(self) -> None:
        self._failures = 0
        self._opened_at = None

    def failed(self) -> None:
        self._failures += 1
        if self._failures >= self.threshold or self._opened_at is not None:
            self._opened_at = time.monotonic()
