"""Shared fixtures: real databases (SQLite and PostgreSQL), the app served over real HTTP."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import httpx
import pytest
from langchain_openai.chat_models._client_utils import _cached_async_httpx_client

from backend.app import create_app
from backend.settings import Settings
from tests.support import databases
from tests.support import telemetry as telemetry_support
from tests.support.api import ROOMY_LIMITS, loopback_client, new_user
from tests.support.report_tool import report_tool_offered
from tests.support.scripted_provider import scripted_provider  # noqa: F401  (fixture for every suite)
from tests.support.servers import serve

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(ROOT / ".cache" / "tiktoken"))
ON_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
DEEP = os.environ.get("CHAT_SHELL_DEEP", "") == "1"
T = TypeVar("T")


# The browser tests are split into this many groups, each on one worker with its own stack and
# Chromium: as one group they ran on one worker for most of the suite's wall time.
BROWSER_GROUPS = 2


def _browser_groups(items: list[pytest.Item]) -> dict[str, str]:
    """Each browser test module's group: the modules, most tests first, each to the group with
    the fewest tests so far (a module's tests share its browser, so they stay together)."""
    counts = Counter(item.module.__name__ for item in items if item.get_closest_marker("browser") is not None)
    sizes = [0] * BROWSER_GROUPS
    groups: dict[str, str] = {}
    for module, count in sorted(counts.items(), key=lambda entry: (-entry[1], entry[0])):
        lightest = sizes.index(min(sizes))
        sizes[lightest] += count
        groups[module] = f"browser-{lightest}"
    return groups


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """With pytest-xdist (`scripts/test.sh` runs three workers, `--dist loadgroup`), the tests of
    one heavy shared resource run on one worker: the local model's server (two of them would
    share the cores the model needs), and each group of browser test modules with its stack and
    Chromium. Tests marked `deep` run only with CHAT_SHELL_DEEP=1; the default suite keeps a
    smaller sample of each."""
    skip_deep = pytest.mark.skip(reason="deep mode only: CHAT_SHELL_DEEP=1 (make test-deep)")
    browser_groups = _browser_groups(items)
    for item in items:
        if not DEEP and item.get_closest_marker("deep") is not None:
            item.add_marker(skip_deep)
        if item.get_closest_marker("browser") is not None:
            item.add_marker(pytest.mark.xdist_group(browser_groups[item.module.__name__]))
        elif item.get_closest_marker("local_model") is not None:
            item.add_marker(pytest.mark.xdist_group("local_model"))


@pytest.fixture(scope="session", autouse=True)
def report_tool() -> Iterator[None]:
    """Runtimes the tests build (through the app too) offer the test tool `generate_report`."""
    with report_tool_offered():
        yield


@pytest.fixture(autouse=True)
def fresh_provider_clients() -> Iterator[None]:
    """langchain-openai shares one async httpx client per (base URL, timeout) for the whole
    process. Each test runs its own event loop and scripted provider, and a provider port the
    OS hands out again would otherwise get a client bound to an earlier test's closed loop."""
    yield
    _cached_async_httpx_client.cache_clear()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return databases.sqlite_template(tmp_path_factory.mktemp("sqlite-template"))


def _off_loop(awaitable: Callable[[], Coroutine[object, object, T]]) -> T:
    """Run database admin work on its own loop in a worker thread, away from the tests' loops."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, awaitable()).result()


@pytest.fixture(scope="session")
def telemetry() -> telemetry_support.Recorded:
    """The OpenTelemetry SDK installed for this process, with in-memory span and metric exporters."""
    return telemetry_support.install()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for the session; on CI a missing server fails, elsewhere skips."""
    if not _off_loop(databases.postgres_available):
        if ON_CI:
            pytest.fail(
                f"PostgreSQL is required on CI and is not reachable at {databases.POSTGRES_ADMIN_URL}"
            )
        pytest.skip("PostgreSQL is not reachable")
    url = _off_loop(databases.create_postgres_database)
    databases.migrate(url)
    yield url
    _off_loop(lambda: databases.drop_postgres_database(url))


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, sqlite_template: Path, tmp_path: Path) -> str:
    """Each test that asks for it runs once on SQLite and once on PostgreSQL."""
    if request.param == "sqlite":
        return databases.sqlite_copy(sqlite_template, tmp_path)
    url: str = request.getfixturevalue("postgres_url")
    _off_loop(lambda: databases.truncate_all(url))
    return url


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    """For tests whose subject is not the database (one backend is enough)."""
    return databases.sqlite_copy(sqlite_template, tmp_path)


@pytest.fixture
def make_settings(tmp_path: Path) -> Callable[..., Settings]:
    def factory(database_url: str, **overrides: object) -> Settings:
        values: dict[str, object] = {
            "data_dir": tmp_path / "data",
            "database_url": database_url,
            "local_model": "off",
            # Nothing listens here; tests that run turns point this at the scripted provider.
            "openai_base_url": "http://127.0.0.1:9/v1",
            "telemetry_enabled": False,
            "password_hash_profile": "CHEAPEST",
            # On PostgreSQL turns are jobs of the queue: the app under test runs a worker too,
            # which hands a turn still running at the test's end back at once.
            "worker_in_process": True,
            "worker_drain_seconds": 0.5,
            **ROOMY_LIMITS,
        }
        values.update(overrides)
        return Settings(_env_file=None, **values)  # type: ignore[call-arg]

    return factory


@pytest.fixture
async def server(database_url: str, make_settings: Callable[..., Settings]) -> AsyncIterator[str]:
    """The backend on a real loopback port, on each database backend."""
    async with serve(create_app(make_settings(database_url))) as base_url:
        yield base_url


@pytest.fixture
async def alice(server: str) -> AsyncIterator[httpx.AsyncClient]:
    client = await new_user(server, "alice")
    yield client
    await client.aclose()


@pytest.fixture
async def bob(server: str) -> AsyncIterator[httpx.AsyncClient]:
    client = await new_user(server, "bob")
    yield client
    await client.aclose()


@pytest.fixture
async def anonymous(server: str) -> AsyncIterator[httpx.AsyncClient]:
    async with loopback_client(server, timeout=30) as client:
        yield client
