"""Fixtures for backend tests: the app pointed at the scripted provider, both runtime modes side
by side (tests/support/modes.py), a private Redis, and empty databases for migration tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import httpx
import pytest

from backend.app import create_app
from backend.settings import Settings
from tests.support import databases
from tests.support.api import signed_in
from tests.support.modes import open_modes  # noqa: F401  (fixture for the tests comparing the modes)
from tests.support.processes import Fleet, MakeFleet, shared_env
from tests.support.scripted_provider import ScriptedProvider
from tests.support.servers import PrivateRedis, private_redis_server, serve


@pytest.fixture
def chat_settings(
    make_settings: Callable[..., Settings], scripted_provider: ScriptedProvider
) -> Callable[..., Settings]:
    """Settings of a backend whose model is the scripted provider (`make_settings` otherwise)."""

    def factory(database_url: str, **overrides: object) -> Settings:
        return make_settings(database_url, openai_base_url=scripted_provider.base_url, **overrides)

    return factory


ServeChat = Callable[..., AbstractAsyncContextManager[str]]


@pytest.fixture
def serve_chat(database_url: str, chat_settings: Callable[..., Settings]) -> ServeChat:
    """Serves the backend on the test's database with `chat_settings` and these overrides: its
    base URL, for a module's server with settings of its own."""
    return lambda **overrides: serve(create_app(chat_settings(database_url, **overrides)))


@pytest.fixture
async def chat_server(serve_chat: ServeChat) -> AsyncIterator[str]:
    """The backend with chat_shell in package mode, talking to the scripted provider."""
    async with serve_chat(sse_ping_seconds=0.5) as base_url:
        yield base_url


@pytest.fixture
async def chatter(chat_server: str) -> AsyncIterator[httpx.AsyncClient]:
    async with signed_in(chat_server, "chatter") as client:
        yield client


@pytest.fixture(params=["sqlite", "postgres"])
def unmigrated_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database on each engine, for migration tests that stop at an older revision."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'old.db'}"
        return
    if not asyncio.run(databases.postgres_available()):
        pytest.skip("PostgreSQL is not reachable")
    url = asyncio.run(databases.create_postgres_database())
    yield url
    asyncio.run(databases.drop_postgres_database(url))


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A Redis of this test alone, so stopping it mid-turn touches nothing else."""
    with private_redis_server(tmp_path) as server:
        yield server


@pytest.fixture
def make_fleet(
    postgres_url: str, tmp_path: Path, scripted_provider: ScriptedProvider, private_redis: PrivateRedis
) -> Iterator[MakeFleet]:
    """Makes the test's fleet of backend processes, with the settings given on top of the shared
    ones (an emptied PostgreSQL database, this test's Redis); its processes stop at the test's end."""
    made: list[Fleet] = []

    def make(**extra: str) -> Fleet:
        env = shared_env(
            postgres_url, tmp_path / "data", scripted_provider.base_url, private_redis.url, **extra
        )
        made.append(Fleet(env, tmp_path))
        return made[-1]

    yield make
    for fleet in made:
        fleet.stop()
