"""The application context: long-lived objects shared by routes and services of one process."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from backend.services.auth import Passwords
from backend.services.broker import LocalBroker
from backend.services.turn_runner import TurnRunner
from backend.settings import Settings


@dataclass
class AppContext:
    settings: Settings
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    broker: LocalBroker
    runner: TurnRunner
    passwords: Passwords
