"""Turns on a job queue (PostgreSQL): procrastinate carries every turn from the web process
that accepted it to a worker process that runs it.

- A send stores its messages and turn, then defers a `run_turn` job. Jobs of one conversation
  share a lock (`conversation_lock`), so the queue itself runs one of them at a time: a turn,
  then the compaction ahead of time its end deferred, then the next turn (which therefore
  starts from the new checkpoint, on whichever worker takes it).
- A stop is the queue's abort: a job still waiting is cancelled (its turn ends `cancelled`),
  a running one is cancelled in its worker, which ends the turn as the user's stop does.
- Workers beat their heartbeat into the queue. The jobs of a worker silent for
  `worker_restart_after_seconds` are taken for lost and retried by the `retry_stalled` job on
  any other worker: the turn runs again from its start. A turn lost on its second attempt
  ends `failed` (`worker_lost`). A running turn that no job carries any more (its web process
  died between the commit and the defer) ends `interrupted`.
- At SIGTERM a worker takes no new job and gives its running turns `worker_drain_seconds` to
  end; those still running are then handed back (`HandedBack`) and run again elsewhere.

Maintenance jobs run on a queue of their own with its own worker, so a worker full of turns
still retries the stalled ones.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Protocol, cast

import psycopg
from procrastinate import App, PsycopgConnector, RetryStrategy
from procrastinate.exceptions import AlreadyEnqueued, ProcrastinateException
from procrastinate.job_context import AbortReason, JobContext
from procrastinate.jobs import Status
from procrastinate.worker import Worker
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.models.base import utcnow
from backend.services.delivery import liveness, turn_endings, turns
from backend.services.delivery.broker import LocalBroker
from backend.services.delivery.turn_host import TurnHost
from backend.services.errors import Unavailable
from chat_shell.contracts import CompactionStatusSink

log = logging.getLogger(__name__)

TURNS_QUEUE = "turns"
UPKEEP_QUEUE = "upkeep"
RUN_TURN = "run_turn"
COMPACT_AHEAD = "compact_ahead"
# procrastinate fetches on a job's insertion and on this poll, not when a lock frees: a job
# queued behind its conversation's running one (the compaction deferred at a turn's end, a
# send during a compaction) starts within this time of the lock's release.
LOCKED_JOB_POLL_SECONDS = 0.25
# A turn runs at most this many times; lost on the last, it ends `failed`.
MAX_TURN_ATTEMPTS = 2
# How often the upkeep job looks for stalled jobs (cron, seconds in the 6th column).
STALLED_CRON = "* * * * * */2"
RETRY_STALLED = "retry_stalled"
PRUNE_CRON = "17 * * * *"
NO_WORKER_RETRY_SECONDS = 5
# A worker that stopped on a database error starts again after this long.
WORKER_RESTART_SECONDS = 1.0
# A running turn that no job carries is taken for orphaned once it is this old.
ORPHAN_AFTER = timedelta(seconds=30)


class HandedBack(Exception):
    """A draining worker stopped the turn at its drain timeout: the queue runs it again."""


def conninfo(database_url: str) -> str:
    """The libpq address of the SQLAlchemy URL (procrastinate speaks psycopg)."""
    return make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)


def conversation_lock(conversation_id: int) -> str:
    return f"conversation:{conversation_id}"


class RoutineJobs(logging.Filter):
    """Keeps the stalled-job check, which runs every 2 s, out of the info log: its deferral,
    start and success lines would be most of a worker's log. Its warnings still show."""

    def filter(self, record: logging.LogRecord) -> bool:
        job = getattr(record, "job", None)
        routine = isinstance(job, dict) and job.get("task_name") == RETRY_STALLED
        return record.levelno >= logging.WARNING or not routine


_ROUTINE_JOBS = RoutineJobs()


def create_queue(database_url: str, *, max_connections: int = 4) -> App:
    """The queue's app; `open_async` it before use."""
    for name in ("procrastinate.periodic", "procrastinate.worker", "procrastinate.worker.upkeep"):
        logging.getLogger(name).addFilter(_ROUTINE_JOBS)
    return App(
        connector=PsycopgConnector(conninfo=conninfo(database_url), min_size=1, max_size=max_connections)
    )


@dataclass(eq=False)
class TurnQueue:
    """The web process's side of the queue: turns in, stops out."""

    app: App
    sessions: async_sessionmaker[AsyncSession]
    broker: LocalBroker
    # A worker whose heartbeat is older is not counted as running.
    silent_after_seconds: float

    async def require_worker(self) -> None:
        """Before a send is stored: some worker beats its heartbeat (else nothing would run it)."""
        async with self.sessions() as db:
            alive = await db.scalar(
                text(
                    "SELECT count(*) FROM procrastinate_workers"
                    " WHERE last_heartbeat > now() - make_interval(secs => :silent)"
                ),
                {"silent": self.silent_after_seconds},
            )
        if not alive:
            raise Unavailable(
                "no_worker",
                "No server is writing replies right now; nothing was sent. Try again in a moment.",
                NO_WORKER_RETRY_SECONDS,
            )

    async def defer_turn(self, started: turns.StartedTurn, model: str) -> None:
        """Queues the committed turn; a queue that cannot take it ends it `failed` at once
        (the question stays, ready to be sent again) and says so."""
        try:
            await self.app.configure_task(
                RUN_TURN, queue=TURNS_QUEUE, lock=conversation_lock(started.conversation_id)
            ).defer_async(turn_id=started.turn_id, model=model)
        except (ProcrastinateException, OSError) as exc:
            log.exception("turn %s could not be queued", started.turn_id)
            await liveness.end_running(self.sessions, self.broker, turn_endings.NOT_QUEUED, [started.turn_id])
            raise Unavailable(
                "queue_unavailable", "the reply could not be queued; nothing is lost, send it again", 5
            ) from exc

    async def abort_turn(self, turn_id: int) -> bool:
        """The queue's abort of the turn's job: a waiting one is cancelled here and its turn
        ends at once; a running one's worker is told (a notification, polled as a fallback)."""
        jobs = await self.app.job_manager.list_jobs_async(task=RUN_TURN, queue=TURNS_QUEUE)
        for job in jobs:
            if job.task_kwargs.get("turn_id") != turn_id or job.id is None:
                continue
            if job.status not in (Status.TODO.value, Status.DOING.value):
                continue
            aborted = await self.app.job_manager.cancel_job_by_id_async(job.id, abort=True)
            if aborted and job.status == Status.TODO.value:
                await liveness.end_running(
                    self.sessions, self.broker, turn_endings.STOPPED_IN_QUEUE, [turn_id]
                )
            return aborted
        return False


class QueuedAhead:
    """Compaction ahead of time as a job of the conversation's lock: the next turn waits for
    it in the queue, on any replica, and a second summary never runs beside it."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def before_end(self, started: turns.StartedTurn, model: str) -> None:
        """Deferred while the turn's job holds the lock: the job runs after the turn and before
        any send that follows the ending the user sees."""
        cid = started.conversation_id
        try:
            await self.app.configure_task(
                COMPACT_AHEAD, queue=TURNS_QUEUE, lock=conversation_lock(cid), queueing_lock=f"ahead:{cid}"
            ).defer_async(turn_id=started.turn_id, model=model)
        except AlreadyEnqueued:
            pass
        except (ProcrastinateException, OSError):
            log.warning("conversation %s: compaction ahead of time not queued", cid, exc_info=True)

    async def wait(
        self, conversation_id: int, on_status: CompactionStatusSink, stop: asyncio.Event | None = None
    ) -> None:
        """Nothing to wait for here: the queue ran the job before the turn (one lock)."""

    def after_end(self, started: turns.StartedTurn, model: str) -> None:
        """Deferred before the end already."""

    async def stop(self) -> None:
        """Nothing in flight: each deferral was awaited by its turn."""


class AheadJob(Protocol):
    """What a `compact_ahead` job runs (compaction's `AheadCompactions`, which builds on the
    turns this package stores: this package never imports it)."""

    async def compact(self, started: turns.StartedTurn, model: str) -> None: ...


@dataclass(frozen=True)
class WorkerOptions:
    concurrency: int
    restart_after_seconds: float
    drain_seconds: float
    event_retention: timedelta | None


@dataclass(eq=False)
class QueueWorker:
    """The jobs a worker process runs, bound to its turn host, and the queue's workers."""

    app: App
    sessions: async_sessionmaker[AsyncSession]
    broker: LocalBroker
    host: TurnHost
    compactions: AheadJob | None
    options: WorkerOptions
    started: asyncio.Event = field(default_factory=asyncio.Event, init=False)

    def __post_init__(self) -> None:
        app = self.app
        # Only a drained turn is retried by the queue; a lost one by `retry_stalled`.
        app.task(
            name=RUN_TURN,
            queue=TURNS_QUEUE,
            pass_context=True,
            retry=RetryStrategy(max_attempts=MAX_TURN_ATTEMPTS, retry_exceptions={HandedBack}),
        )(self.run_turn)
        app.task(name=COMPACT_AHEAD, queue=TURNS_QUEUE)(self.compact_ahead)
        app.periodic(cron=STALLED_CRON)(
            app.task(name=RETRY_STALLED, queue=UPKEEP_QUEUE, queueing_lock=RETRY_STALLED)(self.retry_stalled)
        )
        app.periodic(cron=PRUNE_CRON)(
            app.task(name="prune_event_logs", queue=UPKEEP_QUEUE, queueing_lock="prune")(
                self.prune_event_logs
            )
        )

    async def run_turn(self, context: JobContext, turn_id: int, model: str) -> None:
        stop = asyncio.Event()
        running = asyncio.create_task(self.host.run(turn_id, model, stop), name=f"turn-{turn_id}")
        try:
            await asyncio.shield(running)
        except asyncio.CancelledError:
            if context.abort_reason() != AbortReason.SHUTDOWN:
                stop.set()  # the user's stop: the turn ends `cancelled` with what it wrote
                await running
                return
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
            log.warning("turn %s still ran at the end of the drain: handed back to the queue", turn_id)
            raise HandedBack(turn_id) from None

    async def compact_ahead(self, turn_id: int, model: str) -> None:
        if self.compactions is None:
            return
        async with self.sessions() as db:
            started = await turns.load_started(db, turn_id, running=False)
        if started is not None:
            await self.compactions.compact(started, model)

    async def retry_stalled(self, timestamp: int) -> None:
        """The queue's stalled-job retry: the jobs of workers silent for too long run again
        (a turn from its start), or, on their last attempt, end."""
        manager = self.app.job_manager
        stalled = await manager.get_stalled_jobs(seconds_since_heartbeat=self.options.restart_after_seconds)
        for job in stalled:
            assert job.id is not None
            try:
                if job.task_name == RUN_TURN and job.attempts + 1 >= MAX_TURN_ATTEMPTS:
                    await manager.finish_job_by_id_async(job.id, Status.FAILED, delete_job=False)
                    turn_id = cast(int, job.task_kwargs["turn_id"])  # a RUN_TURN job's kwargs are JSON
                    await liveness.end_running(
                        self.sessions, self.broker, turn_endings.WORKER_LOST, [turn_id]
                    )
                else:
                    await manager.retry_job(job)
                    log.warning("job %s (%s) lost its worker: it runs again", job.id, job.task_name)
            except ProcrastinateException:
                log.info("job %s was recovered by another worker", job.id)
        await self._end_orphans()

    async def _end_orphans(self) -> None:
        async with self.sessions() as db:
            orphans = list(
                await db.scalars(
                    text(
                        "SELECT t.id FROM turns t WHERE t.status = 'running' AND t.started_at < :cutoff"
                        " AND NOT EXISTS (SELECT 1 FROM procrastinate_jobs j WHERE j.task_name = :task"
                        " AND j.status IN ('todo', 'doing') AND (j.args->>'turn_id')::bigint = t.id)"
                    ),
                    {"cutoff": utcnow() - ORPHAN_AFTER, "task": RUN_TURN},
                )
            )
        if orphans:
            await liveness.end_running(self.sessions, self.broker, turn_endings.INTERRUPTED, orphans)

    async def prune_event_logs(self, timestamp: int) -> None:
        if self.options.event_retention is not None:
            await liveness.prune_old_logs(self.sessions, self.options.event_retention)

    async def run(self, *, signals: bool) -> None:
        """Both workers, until cancelled or (with `signals`, a worker process of its own)
        SIGTERM/SIGINT: the turns' and the upkeep's. Either way the turns drain first.
        `started` is set once the turns' worker is registered in the queue."""
        options = self.options
        beat = max(0.5, options.restart_after_seconds / 4)

        def turns_worker() -> Worker:
            return Worker(
                self.app,
                queues=[TURNS_QUEUE],
                name="turns",
                concurrency=options.concurrency,
                shutdown_graceful_timeout=options.drain_seconds,
                install_signal_handlers=signals,
                update_heartbeat_interval=beat,
                stalled_worker_timeout=options.restart_after_seconds,
                delete_jobs="successful",
                fetch_job_polling_interval=LOCKED_JOB_POLL_SECONDS,
            )

        def upkeep_worker() -> Worker:
            return Worker(
                self.app,
                queues=[UPKEEP_QUEUE],
                name="upkeep",
                concurrency=1,
                install_signal_handlers=False,
                update_heartbeat_interval=beat,
                stalled_worker_timeout=options.restart_after_seconds,
                delete_jobs="successful",
            )

        upkeep = asyncio.create_task(_supervised(upkeep_worker), name="queue-worker-upkeep")
        try:
            await _supervised(turns_worker, self.started)
        finally:
            upkeep.cancel()
            await asyncio.gather(upkeep, return_exceptions=True)


async def _supervised(make: Callable[[], Worker], started: asyncio.Event | None = None) -> None:
    """A procrastinate worker, started again whenever it ends on an error. It stops for good
    when one of its own queries fails (its job fetch has no retry, and a failed side task such
    as the heartbeat stops it): a dropped connection (a database restart, `pg_terminate_backend`)
    must not leave a worker process that takes no more turns. A requested stop (a signal, a
    cancellation) ends it."""
    while True:
        worker = make()
        running = asyncio.create_task(worker.run())
        # procrastinate's Worker sets `worker_id` once registered, and announces it no other way.
        while started is not None and worker.worker_id is None and not running.done():  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        if started is not None and worker.worker_id is not None:
            started.set()
        try:
            await running
            return
        except (ProcrastinateException, psycopg.Error, OSError):
            log.warning("the queue's worker stopped on a database error: starting it again", exc_info=True)
            await asyncio.sleep(WORKER_RESTART_SECONDS)
