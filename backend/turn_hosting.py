"""Where turns run, wired from settings: the embedded server's own host, a worker inside
`serve` (a small PostgreSQL install), or `chat-shell worker`, a process that runs nothing else.

`create_app` and the worker command build their host here, so a turn runs the same way in
each: the same runtime, event writer, compaction ahead of time and generated titles.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack
from datetime import timedelta

from procrastinate import App
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend import collector
from backend.db import check_schema, create_engine, session_factory
from backend.logs import configure_logging
from backend.runtime_factory import open_runtime
from backend.secret_policy import require_backend_secrets
from backend.services.compaction.ahead import AheadCompactions
from backend.services.dashboard import rollups
from backend.services.delivery.broker import LocalBroker, create_broker
from backend.services.delivery.capabilities import CapabilityIssuer
from backend.services.delivery.event_log import EventWriter
from backend.services.delivery.job_queue import QueuedAhead, QueueWorker, WorkerOptions, create_queue
from backend.services.delivery.turn_host import HostOptions, TurnHost
from backend.services.model_catalog import configured_catalog
from backend.services.titles import GeneratedTitles
from backend.settings import Settings
from chat_shell.contracts import TurnRuntime
from chat_shell.runtime import ChatShell

log = logging.getLogger(__name__)


def remote_access(settings: Settings, key: bytes) -> CapabilityIssuer | None:
    """Service mode: each turn carries this backend's URL and a capability for its turn."""
    if settings.runtime_mode != "service":
        return None
    return CapabilityIssuer(key, settings.backend_url, settings.turn_max_seconds)


def compactions_for(
    settings: Settings, sessions: async_sessionmaker[AsyncSession], runtime: TurnRuntime
) -> AheadCompactions | None:
    """Compaction ahead of time needs chat_shell in this process (package mode)."""
    if settings.compaction_ahead and isinstance(runtime, ChatShell):
        return AheadCompactions(sessions, runtime, settings.system_prompt)
    return None


def build_host(
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    runtime: TurnRuntime,
    writer: EventWriter,
    broker: LocalBroker,
    key: bytes,
    *,
    compactions: AheadCompactions | None,
    queue: App | None,
) -> TurnHost:
    """A host of turns; with `queue` its compactions ahead of time are jobs of the queue."""
    ahead = QueuedAhead(queue) if queue is not None and compactions is not None else compactions
    return TurnHost(
        sessions,
        runtime,
        writer,
        broker,
        HostOptions(settings.system_prompt, settings.turn_max_seconds, remote_access(settings, key)),
        ahead=ahead,
        titles=GeneratedTitles(sessions, runtime) if settings.generated_titles else None,
    )


def queue_worker(
    settings: Settings,
    queue: App,
    sessions: async_sessionmaker[AsyncSession],
    broker: LocalBroker,
    host: TurnHost,
    compactions: AheadCompactions | None,
    concurrency: int | None = None,
) -> QueueWorker:
    days = settings.event_log_retention_days
    options = WorkerOptions(
        concurrency=concurrency or settings.worker_concurrency,
        restart_after_seconds=settings.worker_restart_after_seconds,
        drain_seconds=settings.worker_drain_seconds,
        event_retention=timedelta(days=days) if days else None,
    )
    return QueueWorker(queue, sessions, broker, host, compactions, options)


async def run_worker(settings: Settings, concurrency: int | None) -> None:
    """`chat-shell worker`: runs the queue's turns until SIGTERM, then drains."""
    key = require_backend_secrets(settings)
    configure_logging(settings.log_level, json_lines=settings.log_json)
    catalog = configured_catalog(settings)
    engine = create_engine(settings.resolved_database_url)
    async with AsyncExitStack() as stack:
        stack.push_async_callback(engine.dispose)
        await check_schema(engine)
        sessions = session_factory(engine)
        runtime = await stack.enter_async_context(open_runtime(settings, sessions, catalog))
        broker = create_broker(settings.redis_url)
        writer = EventWriter(sessions, broker.publish, rollups.write_staged)
        writer.start()
        stack.push_async_callback(broker.stop)
        stack.push_async_callback(writer.stop)
        queue = create_queue(settings.resolved_database_url, max_connections=8)
        await stack.enter_async_context(queue.open_async())
        compactions = compactions_for(settings, sessions, runtime)
        host = build_host(
            settings, sessions, runtime, writer, broker, key, compactions=compactions, queue=queue
        )
        stack.push_async_callback(host.stop)
        await broker.start(host.cancel_local, host.decide_local)
        worker = queue_worker(settings, queue, sessions, broker, host, compactions, concurrency)
        # As in `serve`: a full collection stalls every turn here, so they run when none does.
        collector.freeze_startup_heap()
        collector.defer_full_collections()
        collections = asyncio.create_task(collector.run_full_collections(lambda: len(host.running) > 0))
        stack.callback(collections.cancel)
        running = asyncio.create_task(worker.run(signals=True), name="queue-worker")
        started = asyncio.create_task(worker.started.wait())
        await asyncio.wait([running, started], return_when=asyncio.FIRST_COMPLETED)
        if worker.started.is_set():
            log.info("worker started: %d turns at once", concurrency or settings.worker_concurrency)
        started.cancel()
        await running
        log.info("worker stopped")
