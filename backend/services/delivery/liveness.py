"""A runner's liveness and recovery, for replicas that share one database (SPEC 6.3).

While a runner lives it marks its running turns alive (the heartbeat), reads the stops stored
for them while the broker could not tell it (several replicas), and prunes old event logs. At
start, and at every beat after, it ends the turns no runner runs any more from what their logs
show: those a stopped process left running become `interrupted`, and its own turns without a
live job (their ending could not be stored) `failed`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Protocol

from sqlalchemy import select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.models import Turn, TurnStatus
from backend.models.base import utcnow
from backend.services.dashboard import rollups
from backend.services.delivery import streams, turn_endings, turns
from backend.services.delivery.broker import LocalBroker
from backend.services.delivery.event_log import StoredEvent

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 5.0
# With several replicas a stop may reach another replica while the broker is down: the stored
# stop requests of this runner's turns are read this often (a stop is seen within 1 s).
STOP_POLL_SECONDS = 0.5
PRUNE_EVERY_SECONDS = 3600.0
# A runner silent for this long is presumed dead (several replicas share the database).
STALE_AFTER = timedelta(seconds=30)
# A turn of this runner without a live job (its ending could not be stored) is recovered once
# its heartbeat is this old: a turn is committed a moment before its job starts.
OWN_DEAD_AFTER = timedelta(seconds=2 * HEARTBEAT_SECONDS)


class RunningJob(Protocol):
    """What liveness reads of a turn job of this runner."""

    cancel: asyncio.Event
    # The turn's log broke: the job is stopping and its heartbeat stops with it.
    log_failed: bool


@dataclass(eq=False)
class Liveness:
    sessions: async_sessionmaker[AsyncSession]
    broker: LocalBroker
    runner_id: str
    # The runner's live jobs by turn id (the runner's own dict, read here).
    jobs: Mapping[int, RunningJob]
    cancel: Callable[[int], Awaitable[bool]]
    # With several replicas (shared broker) only stale turns are orphans; alone, all are.
    shared: bool
    # Event rows of turns finished longer ago are pruned; their replay is synthesized.
    event_retention: timedelta | None
    _next_prune: float = field(default=0.0, init=False)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list, init=False)

    async def start(self) -> None:
        await self.recover_orphans(stale_only=self.shared)
        self._tasks.append(asyncio.create_task(self._heartbeat_loop(), name="turn-heartbeat"))
        if self.shared:
            self._tasks.append(asyncio.create_task(self._stop_poll_loop(), name="turn-stop-poll"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            try:
                await self.beat()
                await self.recover_orphans(stale_only=True)
                await self._prune_if_due()
            except Exception:
                log.exception("turn maintenance failed")

    async def beat(self) -> None:
        """Marks this replica's running turns alive. A turn whose row another transaction holds
        (its end being stored, a stop) is skipped until the next beat: waiting for it could
        deadlock with a commit that ends several turns, which locks their rows in its own order.
        `NO KEY UPDATE`, as the update itself takes: the key-share locks of the event log's
        inserts (its foreign key) do not make a turn skip."""
        live = [turn_id for turn_id, job in self.jobs.items() if not job.log_failed]
        if not live:
            return
        unlocked = (
            select(Turn.id)
            .where(Turn.id.in_(live), Turn.status == TurnStatus.RUNNING)
            .with_for_update(skip_locked=True, key_share=True)
        )
        async with self.sessions() as db, db.begin():
            await db.execute(update(Turn).where(Turn.id.in_(unlocked)).values(heartbeat_at=utcnow()))

    async def _stop_poll_loop(self) -> None:
        while True:
            await asyncio.sleep(STOP_POLL_SECONDS)
            running = [turn_id for turn_id, job in self.jobs.items() if not job.cancel.is_set()]
            if not running:
                continue
            try:
                async with self.sessions() as db:
                    stopped = await turns.stops_requested(db, running)
            except (SQLAlchemyError, OSError):
                log.warning("stored stop requests could not be read", exc_info=True)
                continue
            for turn_id in stopped:
                await self.cancel(turn_id)

    async def _prune_if_due(self) -> None:
        now = asyncio.get_running_loop().time()
        if self.event_retention is None or now < self._next_prune:
            return
        self._next_prune = now + PRUNE_EVERY_SECONDS
        async with self.sessions() as db, db.begin():
            pruned = await streams.prune_finished(db, utcnow() - self.event_retention)
        if pruned:
            log.info("pruned the event logs of %d finished turns", pruned)

    async def recover_orphans(self, *, stale_only: bool) -> int:
        """Turns left running by a stopped process become `interrupted`, and turns of this
        process without a live job `failed`; partial output kept."""
        now = utcnow()
        recovered: list[StoredEvent] = []
        async with self.sessions() as db, db.begin():
            orphans = await turn_endings.orphaned_turns(
                db, self.runner_id, now - STALE_AFTER if stale_only else None, now - OWN_DEAD_AFTER
            )
            for turn in orphans:
                if turn.runner_id != self.runner_id:
                    recovered.append(await turn_endings.end_from_log(db, turn, turn_endings.INTERRUPTED))
                    log.warning("turn %s was left running by a stopped process: marked interrupted", turn.id)
                elif turn.id not in self.jobs:
                    recovered.append(await turn_endings.end_from_log(db, turn, turn_endings.LOG_FAILED))
                    log.warning("turn %s lost its job: marked failed", turn.id)
            await rollups.write_staged(db)
        if recovered:
            await self.broker.publish(recovered)
        return len(recovered)
