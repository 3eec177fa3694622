"""Live fan-out of committed turn events, and stop requests, across listeners and replicas.

The durable log is the source of truth; a broker only tells listeners early. A listener that
falls behind (a client that stops reading) is marked lagged and its queue dropped, so a slow
consumer can neither block a turn nor grow memory: it re-reads what it missed from the log.

`LocalBroker` serves a single process. `RedisBroker` adds Redis Streams (one stream per turn)
so a client attached to any replica follows a turn running on another, and pub/sub channels
for stop requests and for "ask first" decisions (a request and its reply: the replica running
the turn is the one that knows whether the call still waits). If Redis fails, listeners are
told the broker is degraded and poll the log.

Publishing to Redis is off the commit path: committed events go to a bounded outbox that one
task sends, each send with a short timeout, behind a breaker that stops trying for a while
after repeated failures. A Redis that hangs therefore never stalls the event writer or other
turns; what it did not carry, other replicas' listeners read from the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, cast

from redis.asyncio import Redis
from redis.exceptions import RedisError

from backend.services.breaker import Breaker
from backend.services.delivery.batch_worker import BatchWorker
from backend.services.delivery.event_log import StoredEvent

log = logging.getLogger(__name__)

QUEUE_LIMIT = 2000
# Answers whether a job of this process was running the turn (and is now told to stop).
CancelHandler = Callable[[int], Awaitable[bool]]
# Delivers a decision on an "ask first" call (turn id, call id, allow): whether the call waited
# and is now decided, or None when no job of this process runs the turn.
DecisionHandler = Callable[[int, str, bool], Awaitable[bool | None]]
# Each call to Redis on the delivery path gives up after this long.
REDIS_TIMEOUT_SECONDS = 0.5
# Committed events waiting to be sent to Redis; past this, they are dropped (listeners on other
# replicas read them from the log).
OUTBOX_LIMIT = 20_000
# How long a decision sent to the other replicas waits for the one running the turn to answer.
DECISION_REPLY_SECONDS = 2.0


class Subscription:
    def __init__(self, turn_id: int) -> None:
        self.turn_id = turn_id
        self.lagged = False
        self.degraded = False
        self._queue: asyncio.Queue[StoredEvent] = asyncio.Queue(QUEUE_LIMIT)
        self._signal = asyncio.Event()

    def offer(self, event: StoredEvent) -> None:
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            # Drop everything queued; the reader re-syncs from the durable log.
            self.lagged = True
            self._queue = asyncio.Queue(QUEUE_LIMIT)
        self._signal.set()

    def degrade(self) -> None:
        self.degraded = True
        self._signal.set()

    def interrupt(self) -> None:
        """Wakes a waiting `next` (it answers None, as after a timeout)."""
        self._signal.set()

    async def next(self, wait_seconds: float) -> StoredEvent | None:
        """The next live event, or None when the caller should re-read the log (timeout, lag)."""
        if self._queue.empty():
            self._signal.clear()
            # A timeout scope, not `wait_for`: no task is made for each wait, once per event.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_seconds):
                    await self._signal.wait()
        if self.lagged:
            self.lagged = False
            return None
        return None if self._queue.empty() else self._queue.get_nowait()


class LocalBroker:
    def __init__(self) -> None:
        self._subscriptions: dict[int, set[Subscription]] = {}
        self._cancel_handler: CancelHandler | None = None
        self._decision_handler: DecisionHandler | None = None

    async def start(self, on_cancel: CancelHandler, on_decide: DecisionHandler) -> None:
        self._cancel_handler = on_cancel
        self._decision_handler = on_decide

    async def stop(self) -> None:
        self._subscriptions.clear()

    async def publish(self, events: Sequence[StoredEvent]) -> None:
        self._deliver(events)

    def _deliver(self, events: Sequence[StoredEvent]) -> None:
        for event in events:
            for subscription in self._subscriptions.get(event.turn_id, ()):
                subscription.offer(event)

    @contextlib.asynccontextmanager
    async def subscribe(self, turn_id: int) -> AsyncIterator[Subscription]:
        subscription = Subscription(turn_id)
        self._subscriptions.setdefault(turn_id, set()).add(subscription)
        try:
            yield subscription
        finally:
            listeners = self._subscriptions.get(turn_id, set())
            listeners.discard(subscription)
            if not listeners:
                self._subscriptions.pop(turn_id, None)

    async def request_cancel(self, turn_id: int) -> bool:
        """Tells the runner of the turn to stop; whether it was reached."""
        return self._cancel_handler is not None and await self._cancel_handler(turn_id)

    async def request_decision(self, turn_id: int, call_id: str, allow: bool) -> bool | None:
        """Delivers a decision to the runner of the turn: whether the call waited (and is now
        decided), or None when no runner could be asked. Alone, no job here means no wait."""
        if self._decision_handler is None:
            return None
        return bool(await self._decision_handler(turn_id, call_id, allow))

    @property
    def listener_count(self) -> int:
        return sum(len(s) for s in self._subscriptions.values())


class RedisBroker(LocalBroker):
    """Local fan-out plus Redis: events go out to other replicas through one stream per turn."""

    STREAM_MAXLEN = 20_000
    STREAM_TTL_SECONDS = 3600
    CANCEL_CHANNEL = "chat_shell:cancel"
    DECISION_CHANNEL = "chat_shell:decision"
    DECISION_REPLY_TTL_SECONDS = 30

    def __init__(self, url: str) -> None:
        super().__init__()
        self._redis: Redis = Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self._readers: dict[int, asyncio.Task[None]] = {}
        self._cancel_task: asyncio.Task[None] | None = None
        self._deciding: set[asyncio.Task[None]] = set()
        self.breaker = Breaker()
        self._outbox: BatchWorker[StoredEvent] = BatchWorker("redis-publisher", self._send_outbox)

    @staticmethod
    def stream_key(turn_id: int) -> str:
        return f"chat_shell:turn:{turn_id}"

    async def start(self, on_cancel: CancelHandler, on_decide: DecisionHandler) -> None:
        await super().start(on_cancel, on_decide)
        self._cancel_task = asyncio.create_task(
            self._listen_for_requests(on_cancel, on_decide), name="redis-request-listener"
        )
        self._outbox.start()

    async def stop(self) -> None:
        tasks = [
            *self._readers.values(),
            *self._deciding,
            *([self._cancel_task] if self._cancel_task else []),
        ]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, self._outbox.stop(), return_exceptions=True)
        self._readers.clear()
        await self._redis.aclose()
        await super().stop()

    async def publish(self, events: Sequence[StoredEvent]) -> None:
        """Local listeners hear the events now; other replicas through the outbox, later."""
        self._deliver(events)
        if not self.breaker.allows() or len(self._outbox) >= OUTBOX_LIMIT:
            return  # other replicas' listeners read these from the log
        self._outbox.add(events)

    async def _send_outbox(self, events: list[StoredEvent]) -> None:
        if not self.breaker.allows():
            return
        try:
            async with asyncio.timeout(REDIS_TIMEOUT_SECONDS):
                async with self._redis.pipeline(transaction=False) as pipe:
                    keys: dict[str, None] = {}
                    for event in events:
                        payload = json.dumps({"seq": event.seq, "event": event.event, "data": event.data})
                        key = self.stream_key(event.turn_id)
                        pipe.xadd(key, {"e": payload}, maxlen=self.STREAM_MAXLEN)
                        keys[key] = None
                    # One expiry per turn in the batch, after its events: half the commands.
                    for key in keys:
                        pipe.expire(key, self.STREAM_TTL_SECONDS)
                    await pipe.execute()
        except (RedisError, OSError, TimeoutError):
            was_closed = self.breaker.closed
            self.breaker.failed()
            if was_closed and not self.breaker.closed:
                log.warning("redis publish failing; other replicas read turn events from the log")
        else:
            self.breaker.succeeded()

    @contextlib.asynccontextmanager
    async def subscribe(self, turn_id: int) -> AsyncIterator[Subscription]:
        async with super().subscribe(turn_id) as subscription:
            reader = self._readers.get(turn_id)
            if reader is None or reader.done():
                self._readers[turn_id] = asyncio.create_task(
                    self._read_stream(turn_id), name=f"redis-turn-{turn_id}"
                )
            try:
                yield subscription
            finally:
                if turn_id not in self._subscriptions and (task := self._readers.pop(turn_id, None)):
                    task.cancel()

    async def _read_stream(self, turn_id: int) -> None:
        key, last_id = self.stream_key(turn_id), "$"
        try:
            while True:
                # RESP2, this client's protocol: [[stream, [(entry id, fields), ...]], ...].
                found = cast(
                    "list[list[Any]]", await self._redis.xread({key: last_id}, block=1000, count=500)
                )
                for _, entries in found:
                    batch = []
                    for entry_id, fields in entries:
                        last_id = entry_id
                        payload = json.loads(fields[b"e"])
                        batch.append(StoredEvent(turn_id, payload["seq"], payload["event"], payload["data"]))
                    self._deliver(batch)
        except RedisError:
            log.warning("redis stream read failed for turn %s; listeners poll the event log", turn_id)
            for subscription in self._subscriptions.get(turn_id, ()):
                subscription.degrade()

    async def request_cancel(self, turn_id: int) -> bool:
        """Tells this replica's job, else every replica through Redis; whether one was reached."""
        if await super().request_cancel(turn_id):
            return True
        try:
            async with asyncio.timeout(REDIS_TIMEOUT_SECONDS):
                listeners = await self._redis.publish(self.CANCEL_CHANNEL, str(turn_id))
        except (RedisError, OSError, TimeoutError):
            log.warning("redis unavailable: the stop of turn %s was not broadcast", turn_id)
            return False
        return bool(listeners)

    async def request_decision(self, turn_id: int, call_id: str, allow: bool) -> bool | None:
        """Decides here when this replica runs the turn; else asks the other replicas and waits
        for the reply of the one running it (None: none answered in time, or Redis is down)."""
        if self._decision_handler is not None:
            local = await self._decision_handler(turn_id, call_id, allow)
            if local is not None:
                return local
        reply_key = f"chat_shell:decision-reply:{uuid.uuid4().hex}"
        request = json.dumps({"turn_id": turn_id, "call_id": call_id, "allow": allow, "reply": reply_key})
        try:
            async with asyncio.timeout(REDIS_TIMEOUT_SECONDS):
                listeners = await self._redis.publish(self.DECISION_CHANNEL, request)
            if not listeners:
                return None
            async with asyncio.timeout(DECISION_REPLY_SECONDS + REDIS_TIMEOUT_SECONDS):
                answer = await self._redis.blpop([reply_key], timeout=DECISION_REPLY_SECONDS)
        except (RedisError, OSError, TimeoutError):
            log.warning("redis unavailable: the decision on turn %s was not delivered", turn_id)
            return None
        return None if answer is None else answer[1] == b"1"

    async def _answer_decision(self, on_decide: DecisionHandler, payload: bytes) -> None:
        request = json.loads(payload)
        decided = await on_decide(request["turn_id"], request["call_id"], request["allow"])
        if decided is None:
            return  # another replica runs the turn and answers
        try:
            async with asyncio.timeout(REDIS_TIMEOUT_SECONDS):
                async with self._redis.pipeline(transaction=False) as pipe:
                    pipe.rpush(request["reply"], "1" if decided else "0")
                    pipe.expire(request["reply"], self.DECISION_REPLY_TTL_SECONDS)
                    await pipe.execute()
        except (RedisError, OSError, TimeoutError):
            log.warning("redis unavailable: the reply to a decision on turn %s was lost", request["turn_id"])

    async def _listen_for_requests(self, on_cancel: CancelHandler, on_decide: DecisionHandler) -> None:
        while True:
            try:
                pubsub = self._redis.pubsub()
                await pubsub.subscribe(self.CANCEL_CHANNEL, self.DECISION_CHANNEL)
                async for message in pubsub.listen():
                    if message.get("type") != "message":
                        continue
                    if message["channel"] == self.CANCEL_CHANNEL.encode():
                        await on_cancel(int(message["data"]))
                    else:
                        # Its own task: a decision in service mode is a call to chat_shell.
                        task = asyncio.create_task(self._answer_decision(on_decide, message["data"]))
                        self._deciding.add(task)
                        task.add_done_callback(self._deciding.discard)
            except RedisError:
                log.warning("redis request channels lost; retrying")
                await asyncio.sleep(1)


def create_broker(redis_url: str | None) -> LocalBroker:
    return RedisBroker(redis_url) if redis_url else LocalBroker()
