"""The application context: long-lived objects shared by routes and services of one process."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from backend.services.accounts.auth import Passwords
from backend.services.attachments.extraction.sandbox import ExtractionSandbox
from backend.services.delivery.broker import LocalBroker
from backend.services.delivery.streams import OpenStreams
from backend.services.delivery.turn_host import TurnHost
from backend.services.delivery.turn_runner import TurnRunner
from backend.services.model_catalog import ModelList
from backend.services.throttle import AttemptThrottle
from backend.settings import Settings
from chat_shell.runtime import RuntimeConfig


@dataclass
class AppContext:
    settings: Settings
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    broker: LocalBroker
    runner: TurnRunner
    # Runs turns in this process: the embedded server's own, or the worker inside `serve`
    # (None: this web process only relays; `chat-shell worker` processes run the turns).
    host: TurnHost | None
    passwords: Passwords
    extraction: ExtractionSandbox
    # Signs and checks turn capabilities (`backend.services.delivery.capabilities`).
    capability_key: bytes
    throttle: AttemptThrottle
    open_streams: OpenStreams
    models: ModelList
    # The runtime's models and profiles (in service mode, those the chat_shell service uses).
    config: RuntimeConfig
