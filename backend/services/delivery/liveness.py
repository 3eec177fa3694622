"""The embedded server's recovery and upkeep, where one process runs every turn (SPEC 6.3).

At start, the turns a stopped process left running end `interrupted` from what their logs
show. While it runs, a turn without a live job (its ending could not be stored) ends `failed`
once the database takes writes again, and the event logs of old finished turns are pruned.
With the job queue (PostgreSQL) the queue's stalled-job retry and its maintenance jobs do this
instead (`job_queue`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Container
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.models import Turn, TurnStatus
from backend.models.base import utcnow
from backend.services.dashboard import rollups
from backend.services.delivery import streams, turn_endings
from backend.services.delivery.broker import LocalBroker
from backend.services.delivery.event_log import StoredEvent

log = logging.getLogger(__name__)

UPKEEP_SECONDS = 5.0
PRUNE_EVERY_SECONDS = 3600.0
# A running turn without a job is recovered once it is this old: a turn is committed a moment
# before its job starts.
LOST_AFTER = timedelta(seconds=30)


async def end_running(
    sessions: async_sessionmaker[AsyncSession],
    broker: LocalBroker,
    ending: turn_endings.LogEnding,
    turn_ids: list[int] | None = None,
) -> int:
    """Ends the running turns named (all of them when None) with what their logs show."""
    ended: list[StoredEvent] = []
    async with sessions() as db, db.begin():
        query = select(Turn).where(Turn.status == TurnStatus.RUNNING).with_for_update(skip_locked=True)
        if turn_ids is not None:
            query = query.where(Turn.id.in_(turn_ids))
        for turn in await db.scalars(query):
            ended.append(await turn_endings.end_from_log(db, turn, ending))
            log.warning("turn %s lost its runner: marked %s", turn.id, ending.code)
        await rollups.write_staged(db)
    if ended:
        await broker.publish(ended)
    return len(ended)


async def prune_old_logs(sessions: async_sessionmaker[AsyncSession], retention: timedelta) -> int:
    async with sessions() as db, db.begin():
        pruned = await streams.prune_finished(db, utcnow() - retention)
    if pruned:
        log.info("pruned the event logs of %d finished turns", pruned)
    return pruned


@dataclass(eq=False)
class Liveness:
    sessions: async_sessionmaker[AsyncSession]
    broker: LocalBroker
    # The turns this process runs now (the host's jobs, read here).
    jobs: Container[int]
    # Event rows of turns finished longer ago are pruned; their replay is synthesized.
    event_retention: timedelta | None
    _next_prune: float = field(default=0.0, init=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False)

    async def start(self) -> None:
        # One process runs every turn: any turn running at its start was left by a stopped one.
        await end_running(self.sessions, self.broker, turn_endings.INTERRUPTED)
        self._task = asyncio.create_task(self._loop(), name="turn-upkeep")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(UPKEEP_SECONDS)
            try:
                await self.recover_lost()
                now = asyncio.get_running_loop().time()
                if self.event_retention is not None and now >= self._next_prune:
                    self._next_prune = now + PRUNE_EVERY_SECONDS
                    await prune_old_logs(self.sessions, self.event_retention)
            except Exception:
                log.exception("turn upkeep failed")

    async def recover_lost(self) -> int:
        """Running turns without a job in this process (their ending could not be stored) end
        `failed`, partial output kept."""
        async with self.sessions() as db:
            running = await db.scalars(
                select(Turn.id).where(
                    Turn.status == TurnStatus.RUNNING, Turn.started_at < utcnow() - LOST_AFTER
                )
            )
            lost = [turn_id for turn_id in running if turn_id not in self.jobs]
        if not lost:
            return 0
        return await end_running(self.sessions, self.broker, turn_endings.LOG_FAILED, lost)
