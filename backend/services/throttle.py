"""Throttling of login and registration per client address and per username (the `limits`
library's moving window; counted in Redis when one is configured, so every replica shares the
counts, in this process's memory otherwise). Every attempt counts, before any password is
hashed: a refused one costs no argon2 work. A Redis that fails or hangs costs a login at most
its short timeout: while it is out (a breaker), attempts are counted in this process instead."""

from __future__ import annotations

import logging
import math
import time
from typing import Literal

from limits import RateLimitItem, parse
from limits.aio.storage import MemoryStorage, Storage
from limits.aio.strategies import MovingWindowRateLimiter
from limits.errors import StorageError
from limits.storage import storage_from_string

from backend.services.breaker import Breaker
from backend.services.errors import RateLimited

log = logging.getLogger(__name__)
# How long one Redis round trip of the throttle may take before the attempt is counted here.
REDIS_TIMEOUT_SECONDS = 0.5

Action = Literal["login", "register"]


class AttemptThrottle:
    def __init__(self, redis_url: str | None, per_address: str, per_username: str) -> None:
        local = MovingWindowRateLimiter(MemoryStorage())
        self._local = local
        self._shared: MovingWindowRateLimiter | None = None
        if redis_url:
            storage = storage_from_string(
                f"async+{redis_url}",
                implementation="redispy",
                key_prefix="chat-shell",
                wrap_exceptions=True,
                socket_timeout=REDIS_TIMEOUT_SECONDS,
                socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
            )
            assert isinstance(storage, Storage)  # the `async+` scheme gives the asyncio storage
            self._shared = MovingWindowRateLimiter(storage)
        self._breaker = Breaker()
        self._per_address = parse(per_address)
        self._per_username = parse(per_username)

    async def attempt(self, action: Action, address: str, username: str) -> None:
        """Counts one attempt; `RateLimited` (with the seconds to wait) when over a limit."""
        await self._hit(self._per_address, action, "address", address)
        await self._hit(self._per_username, action, "username", username.strip().lower()[:64])

    async def _hit(self, item: RateLimitItem, action: Action, kind: str, key: str) -> None:
        limiter = self._limiter()
        try:
            reset_at = await _count(limiter, item, action, kind, key)
        except StorageError as exc:
            log.warning("login throttle: Redis failed (%s); counting in this process", exc)
            self._breaker.failed()
            reset_at = await _count(self._local, item, action, kind, key)
        else:
            if limiter is self._shared:
                self._breaker.succeeded()
        if reset_at is None:
            return
        wait = max(1, math.ceil(reset_at - time.time()))
        what = "from this address" if kind == "address" else "for this username"
        raise RateLimited(
            "too_many_attempts", f"too many {action} attempts {what}; try again in {wait} s", retry_after=wait
        )

    def _limiter(self) -> MovingWindowRateLimiter:
        if self._shared is not None and self._breaker.allows():
            return self._shared
        return self._local


async def _count(
    limiter: MovingWindowRateLimiter, item: RateLimitItem, action: Action, kind: str, key: str
) -> float | None:
    """Counts one attempt; None when allowed, else when the window lets the next one in."""
    if await limiter.hit(item, action, kind, key):
        return None
    return (await limiter.get_window_stats(item, action, kind, key)).reset_time
